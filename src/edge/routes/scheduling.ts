/**
 * Per-credential scheduling settings (docs/api.md "Scheduling"), for the team's owner and admins
 * (user JWT):
 *
 *   GET /credentials/{credentialId}/scheduling   {credential_id, scheduling_weight, max_concurrent_tasks}
 *   PUT /credentials/{credentialId}/scheduling   {scheduling_weight?, max_concurrent_tasks?} -> {id} (the credential's)
 */
import { z } from 'zod';
import type { SchedulingUseCases } from '../../app/scheduling.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, parseBody, teamPrincipalOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';

const ADMIN: RouteAuth = { kinds: ['user'], team: true, role: 'admin' };

const putBody = z
  .object({
    scheduling_weight: z.number('must be a number').positive('must be > 0').max(1000, 'must be <= 1000').optional(),
    max_concurrent_tasks: z.int('must be an integer or null').min(1, 'must be >= 1 (null removes the cap)').max(1_000_000).nullable().optional(),
  })
  .strict()
  .refine((b) => b.scheduling_weight !== undefined || b.max_concurrent_tasks !== undefined, 'at least one of scheduling_weight, max_concurrent_tasks is required');

export const CredentialSchedulingSchema = D.named(
  'CredentialScheduling',
  z.object({ credential_id: z.uuid(), scheduling_weight: z.number(), max_concurrent_tasks: z.number().int().nullable() }),
);

export function schedulingRoutes(scheduling: SchedulingUseCases): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/credentials/{credentialId}/scheduling',
      doc: { summary: "A credential's fair-share weight and max_concurrent_tasks (owner or admin)", tags: ['scheduling'], responses: { 200: CredentialSchedulingSchema } },
      auth: ADMIN,
      handler: async (c) => scheduling.getScheduling(teamPrincipalOf(c), uuidParam(c, 'credentialId')),
    },
    {
      method: 'PUT',
      path: '/credentials/{credentialId}/scheduling',
      doc: { summary: "Set a credential's fair-share weight and max_concurrent_tasks (owner or admin)", tags: ['scheduling'], body: putBody, responses: { 200: D.IdResult } },
      auth: ADMIN,
      handler: async (c) => {
        const id = uuidParam(c, 'credentialId');
        const b = parseBody(putBody, c.body);
        const r = await scheduling.putScheduling(teamPrincipalOf(c), id, b, auditOf(c, 'credential.scheduling_update', 'credential', id));
        c.log.info({ credential_id: id, scheduling_weight: r.scheduling_weight, max_concurrent_tasks: r.max_concurrent_tasks }, 'credential scheduling updated');
        return { id: r.credential_id };
      },
    },
  ];
}
