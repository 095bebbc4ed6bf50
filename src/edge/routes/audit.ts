/**
 * The audit log (docs/api.md "Audit log"): every management write of a team, appended in the same
 * transaction as the change. Read by the team's admins and owner only (user JWT or dk-; sk- refused
 * like every management route); another team's entries are never visible (the store filters by the
 * caller's team).
 *
 *   GET /audit-log   {audit_list, page_meta}  ?current_page, per_page, action, actor, target_type, target_id, since, until
 */
import { z } from 'zod';
import * as D from '../openapi/schemas.js';
import type { AuditUseCases } from '../../app/audit.js';
import { AUDIT_ACTOR_KINDS } from '../../shared/audit.js';
import { fromZodIssues } from '../../shared/errors.js';
import { parsePage } from '../../shared/pagination.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { teamPrincipalOf } from '../params.js';

const ADMIN: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };

/** Query of GET /audit-log (besides current_page and per_page). */
export const AuditLogQuery = z.strictObject({
  current_page: z.string().optional(),
  per_page: z.string().optional(),
  /** An exact action (`workflow.update`), or a resource prefix ending with a dot (`workflow.`). */
  action: z
    .string()
    .max(100)
    .regex(/^[a-z_]+(\.[a-z_]*)?$/, 'must be an action such as workflow.update, or a prefix such as workflow.')
    .optional(),
  /** A user id or credential id. */
  actor: z.uuid().optional(),
  target_type: z
    .string()
    .max(100)
    .regex(/^[a-z_]+$/)
    .optional(),
  target_id: z.string().min(1).max(256).optional(),
  since: z.iso.datetime({ offset: true }).optional(),
  until: z.iso.datetime({ offset: true }).optional(),
});

export const AuditEntrySchema = D.named('AuditEntry', z.object({
  id: z.uuid(),
  team_id: z.uuid(),
  actor_kind: z.enum(AUDIT_ACTOR_KINDS),
  actor_user_id: z.uuid().nullable(),
  actor_credential_id: z.uuid().nullable(),
  action: z.string(),
  target_type: z.string(),
  target_id: z.string().nullable(),
  request_id: z.string().nullable(),
  client_ip: z.string().nullable(),
  outcome: z.literal('succeeded'),
  details: z.record(z.string(), z.unknown()),
  created_at: z.iso.datetime(),
}));

export const AuditLogResponse = z.object({
  audit_list: z.array(AuditEntrySchema),
  page_meta: z.object({ current_page: z.number().int(), per_page: z.number().int(), total_count: z.number().int() }),
});

export function auditRoutes(audit: AuditUseCases): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/audit-log',
      auth: ADMIN,
      doc: { summary: "The team's audit log, newest first (admin or owner)", tags: ['audit'], query: AuditLogQuery.omit({ current_page: true, per_page: true }), paged: true, responses: { 200: AuditLogResponse } },
      handler: async (c) => {
        const pg = parsePage(c.query);
        const parsed = AuditLogQuery.safeParse(Object.fromEntries(c.query));
        if (!parsed.success) throw fromZodIssues(parsed.error.issues);
        const f = parsed.data;
        return audit.listAudit(teamPrincipalOf(c), pg, {
          action: f.action,
          actor: f.actor?.toLowerCase(),
          targetType: f.target_type,
          targetId: f.target_id,
          since: f.since ? new Date(f.since) : undefined,
          until: f.until ? new Date(f.until) : undefined,
        });
      },
    },
  ];
}
