import type { Readable } from 'node:stream';
import type { LocalObjectStore } from '../../storage/local.js';
import { LOCAL_STORAGE_PATH } from '../../storage/local.js';
import { handleLocalStorageRequest } from '../../storage/local-http.js';
import type { RouteDoc } from '../openapi/types.js';
import type { RouteDef } from '../http.js';

/**
 * The built-in object store's HTTP face (/storage/*): presigned PUT/GET/HEAD with S3's rules. The
 * signature in the URL is the authorization; bodies stream to and from disk with backpressure.
 */
/** S3's single-PUT limit; the signed Content-Length is what bounds each request. */
const MAX_SINGLE_PUT = 5 * 1024 * 1024 * 1024;

const STORAGE_DOC: Record<'GET' | 'HEAD' | 'PUT', RouteDoc> = {
  GET: { summary: 'Download an object (signed URL from a result or presign)', tags: ['storage'], responses: { 200: { contentType: 'application/octet-stream' }, 206: { contentType: 'application/octet-stream' } }, errors: [403, 404] },
  HEAD: { summary: 'Object metadata (signed URL)', tags: ['storage'], responses: { 200: { description: 'Headers only' } }, errors: [403, 404] },
  PUT: { summary: 'Upload to a presigned URL (send every upload_headers entry verbatim)', tags: ['storage'], rawBodyType: 'application/octet-stream', responses: { 200: { description: 'Stored' } }, errors: [403, 412, 413] },
};

export function storageRoutes(store: LocalObjectStore): RouteDef[] {
  const serve = async (c: Parameters<NonNullable<RouteDef['stream']>>[0], res: Parameters<NonNullable<RouteDef['stream']>>[1]): Promise<void> => {
    const path = c.path.slice(LOCAL_STORAGE_PATH.length);
    const out = await handleLocalStorageRequest(store, { method: c.method, path, query: c.query, headers: c.headers }, c.method === 'PUT' ? res.body() ?? (async function* () {})() : null);
    if (res.aborted) {
      (out.stream as Readable | undefined)?.destroy();
      return;
    }
    const { ['Content-Length']: len, ...headers } = out.headers;
    res.writeHead(out.status, headers);
    if (out.stream) {
      if (c.method === 'HEAD') {
        (out.stream as Readable).destroy();
        res.endWithoutBody(Number(len ?? 0));
        return;
      }
      await res.pipeFrom(out.stream, Number(len ?? 0));
      return;
    }
    if (c.method === 'HEAD') {
      res.endWithoutBody(len === undefined ? undefined : Number(len));
      return;
    }
    const body = out.body ?? '';
    // an error answered before the PUT body was consumed: close rather than drain it
    if (c.method === 'PUT' && out.status >= 400) res.endAndClose(body);
    else res.end(body);
  };
  const base = LOCAL_STORAGE_PATH.replace(/\/+$/, '');
  return (['GET', 'HEAD', 'PUT'] as const).map((method) => ({ method, path: `${base}/*`, absolute: true, auth: { kinds: 'public' as const }, maxBodyBytes: MAX_SINGLE_PUT, stream: serve, tag: 'storage', doc: STORAGE_DOC[method] }));
}
