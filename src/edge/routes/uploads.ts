/**
 * Multipart uploads: JWT callers only (sk- and dk- get 401, the spec's rule). See docs/api.md.
 */
import type { MultipartUploads } from '../../files/multipart.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { callerOf } from './files.js';

export const MULTIPART: RouteAuth = { kinds: ['user'], team: true, jwtOnly401: true };

export function uploadRoutes(d: { multipart: MultipartUploads }): RouteDef[] {
  return [
    { method: 'POST', path: '/uploads/multipart/initiate', auth: MULTIPART, handler: async (c) => d.multipart.initiate(callerOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/presign-parts', auth: MULTIPART, handler: async (c) => d.multipart.presignParts(callerOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/complete', auth: MULTIPART, handler: async (c) => d.multipart.complete(callerOf(c), c.body) },
    { method: 'POST', path: '/uploads/multipart/abort', auth: MULTIPART, handler: async (c) => d.multipart.abort(callerOf(c), c.body) },
  ];
}
