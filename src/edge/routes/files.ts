/**
 * Input file staging (runtime surface): POST /r/files/presign. See docs/api.md.
 */
import type { FileStaging, PresignResult } from '../../files/staging.js';
import type { StagePurpose } from '../../files/keys.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth, TeamPrincipal } from '../principal.js';
import * as D from '../openapi/schemas.js';
import { presignBodySchema } from '../../files/staging.js';

const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

export const callerOf = (c: Ctx): { kind: string; teamId: string; userId?: string; credentialId?: string } => {
  const p = c.principal as TeamPrincipal;
  return { kind: p.kind, teamId: p.teamId, ...(p.userId ? { userId: p.userId } : {}), ...(p.credentialId ? { credentialId: p.credentialId } : {}) };
};

/** The presign response: the key under `keyField` (file_key or storage_key), the URL and its headers. */
export function presignReply(r: PresignResult, keyField: 'file_key' | 'storage_key'): Record<string, unknown> {
  return {
    [keyField]: r.key,
    upload_url: r.uploadUrl,
    upload_headers: r.uploadHeaders,
    upload_mode: r.uploadMode,
    upload_expires_at: r.uploadExpiresAt,
    expires_at: r.expiresAt,
  };
}

export const presignHandler =
  (staging: FileStaging, purpose: StagePurpose, keyField: 'file_key' | 'storage_key') =>
  async (c: Ctx): Promise<Record<string, unknown>> =>
    presignReply(await staging.presign(callerOf(c), purpose, staging.parseBody(c.body)), keyField);

export function fileRoutes(d: { staging: FileStaging }): RouteDef[] {
  return [{ method: 'POST', path: '/r/files/presign', auth: RUNTIME, doc: { summary: 'Stage an input file: a presigned PUT (file_key is the value of a file parameter)', tags: ['runtime', 'files'], body: presignBodySchema, responses: { 200: D.PresignedUpload }, errors: [413] }, handler: presignHandler(d.staging, 'input', 'file_key') }];
}
