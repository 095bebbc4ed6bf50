/**
 * Multipart uploads: JWT callers only (sk- and dk- get 401, the spec's rule). See docs/api.md. The
 * use cases are src/app/uploads.ts.
 */
import type { MultipartUseCases } from '../../app/uploads.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { teamPrincipalOf } from '../params.js';
import * as D from '../openapi/schemas.js';
import { abortSchema, completeSchema, initiateSchema, presignPartsSchema } from '../../files/multipart.js';

export const MULTIPART: RouteAuth = { kinds: ['user'], team: true, jwtOnly401: true };

export function uploadRoutes(d: { multipart: MultipartUseCases }): RouteDef[] {
  const m = d.multipart;
  return [
    { method: 'POST', path: '/uploads/multipart/initiate', auth: MULTIPART, doc: { summary: 'Start a multipart upload (JWT only)', tags: ['files'], body: initiateSchema, responses: { 200: D.MultipartInitiated } }, handler: async (c) => m.initiate(teamPrincipalOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/presign-parts', auth: MULTIPART, doc: { summary: 'Presign parts of a multipart upload', tags: ['files'], body: presignPartsSchema, responses: { 200: D.MultipartParts } }, handler: async (c) => m.presignParts(teamPrincipalOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/complete', auth: MULTIPART, doc: { summary: 'Complete a multipart upload', tags: ['files'], body: completeSchema, responses: { 200: D.MultipartCompleted } }, handler: async (c) => m.complete(teamPrincipalOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/abort', auth: MULTIPART, doc: { summary: 'Abort a multipart upload', tags: ['files'], body: abortSchema, responses: { 200: D.Success } }, handler: async (c) => m.abort(teamPrincipalOf(c), c.body) },
  ];
}
