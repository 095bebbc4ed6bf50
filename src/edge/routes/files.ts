/**
 * Input file staging (runtime surface): POST /r/files/presign. See docs/api.md. The use cases are
 * src/app/uploads.ts.
 */
import type { UploadUseCases } from '../../app/uploads.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { teamPrincipalOf } from '../params.js';
import * as D from '../openapi/schemas.js';
import { presignBodySchema } from '../../files/staging.js';

const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

export function fileRoutes(uploads: UploadUseCases): RouteDef[] {
  return [{ method: 'POST', path: '/r/files/presign', auth: RUNTIME, doc: { summary: 'Stage an input file: a presigned PUT (file_key is the value of a file parameter)', tags: ['runtime', 'files'], body: presignBodySchema, responses: { 200: D.PresignedUpload }, errors: [413] }, handler: async (c) => uploads.createUpload(teamPrincipalOf(c), c.body) }];
}
