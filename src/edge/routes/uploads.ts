/**
 * Multipart uploads: JWT callers only (sk- and dk- get 401, the spec's rule). See docs/api.md.
 */
import type { MultipartUploads } from '../../files/multipart.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { callerOf } from './files.js';
import * as D from '../openapi/schemas.js';
import { abortSchema, completeSchema, initiateSchema, presignPartsSchema } from '../../files/multipart.js';

export const MULTIPART: RouteAuth = { kinds: ['user'], team: true, jwtOnly401: true };

export function uploadRoutes(d: { multipart: MultipartUploads }): RouteDef[] {
  return [
    { method: 'POST', path: '/uploads/multipart/initiate', auth: MULTIPART, doc: { summary: 'Start a multipart upload (JWT only)', tags: ['files'], body: initiateSchema, responses: { 200: D.MultipartInitiated } }, handler: async (c) => d.multipart.initiate(callerOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/presign-parts', auth: MULTIPART, doc: { summary: 'Presign parts of a multipart upload', tags: ['files'], body: presignPartsSchema, responses: { 200: D.MultipartParts } }, handler: async (c) => d.multipart.presignParts(callerOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/complete', auth: MULTIPART, doc: { summary: 'Complete a multipart upload', tags: ['files'], body: completeSchema, responses: { 200: D.MultipartCompleted } }, handler: async (c) => d.multipart.complete(callerOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/abort', auth: MULTIPART, doc: { summary: 'Abort a multipart upload', tags: ['files'], body: abortSchema, responses: { 200: D.Success } }, handler: async (c) => d.multipart.abort(callerOf(c), c.body) },
  ];
}
