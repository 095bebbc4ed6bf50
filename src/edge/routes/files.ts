/**
 * Input file staging (runtime surface): POST /r/files/presign. See docs/api.md. The use cases are
 * src/app/uploads.ts.
 */
import type { StagePurpose } from '../../files/keys.js';
import type { Caller } from '../../files/staging.js';
import { fileCaller, UploadUseCases, type Staging } from '../../app/uploads.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { teamPrincipalOf } from '../params.js';
import * as D from '../openapi/schemas.js';
import { presignBodySchema } from '../../files/staging.js';

const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

export const callerOf = (c: Ctx): Caller => fileCaller(teamPrincipalOf(c));

export const presignHandler = (staging: Staging, purpose: StagePurpose, keyField: 'file_key' | 'storage_key'): ((c: Ctx) => Promise<Record<string, unknown>>) => {
  const uploads = new UploadUseCases(staging);
  return async (c) => uploads.presign(teamPrincipalOf(c), purpose, c.body, keyField);
};

export function fileRoutes(uploads: UploadUseCases): RouteDef[] {
  return [{ method: 'POST', path: '/r/files/presign', auth: RUNTIME, doc: { summary: 'Stage an input file: a presigned PUT (file_key is the value of a file parameter)', tags: ['runtime', 'files'], body: presignBodySchema, responses: { 200: D.PresignedUpload }, errors: [413] }, handler: async (c) => uploads.createUpload(teamPrincipalOf(c), c.body) }];
}
