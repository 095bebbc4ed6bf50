/**
 * Framework-agnostic HTTP handling for the local object store's signed URLs
 * (`/storage/<key>?X-Gantry-...`). The edge mounts it under LOCAL_STORAGE_PATH and streams the
 * request body in as an AsyncIterable<Buffer>; see createBodyChannel for push-style servers
 * (uWebSockets.js onData) and node-http.ts for a node:http adapter.
 *
 * Answers like S3: PUT object -> 200 + ETag; PUT part (?partNumber&uploadId) -> 200 + ETag;
 * GET -> 200/206 streamed; HEAD -> headers only. Errors carry S3 XML bodies
 * (<Error><Code>AccessDenied</Code>...), statuses 400/403/404/405/411/412/416/500.
 */
import { randomBytes } from 'node:crypto';
import { AppError, isAppError } from '../shared/errors.js';
import { keyProblem } from './port.js';
import { Q_DISPOSITION, Q_PART_NUMBER, Q_UPLOAD_ID, RangeNotSatisfiable } from './local.js';
import type { LocalObjectStore } from './local.js';

export interface LocalStorageRequest {
  method: string;
  /** The part after /storage/, raw (percent-encoded) or decoded; no query string. */
  path: string;
  query: URLSearchParams;
  /** Lowercased names. */
  headers: Record<string, string>;
}

export interface LocalStorageResponse {
  status: number;
  headers: Record<string, string>;
  body?: Buffer | string;
  /** For GET: the object bytes (exactly headers['Content-Length'] of them). Destroy it if the client goes away. */
  stream?: NodeJS.ReadableStream;
}

const S3_CODES: Record<string, string> = {
  invalid_object_key: 'InvalidArgument',
  malformed_xml: 'MalformedXML',
  invalid_parameter: 'InvalidArgument',
};
const SPECIAL_STATUS: Record<string, number> = {
  missing_content_length: 411,
  invalid_range: 416,
  method_not_allowed: 405,
};
const KIND_STATUS: Record<string, number> = {
  bad_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  gone: 410,
  precondition_failed: 412,
  payload_too_large: 413,
};

function s3Code(code: string): string {
  return S3_CODES[code] ?? code.split('_').map((w) => (w ? w[0]!.toUpperCase() + w.slice(1) : '')).join('');
}

function xmlEscape(s: string): string {
  return s.replace(/[<>&'"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[c] ?? c);
}

function errorResponse(e: unknown, method: string, key: string | null): LocalStorageResponse {
  const requestId = randomBytes(8).toString('hex').toUpperCase();
  let status = 500;
  let code = 'InternalError';
  let message = 'We encountered an internal error. Please try again.';
  const headers: Record<string, string> = { 'x-amz-request-id': requestId };
  if (isAppError(e)) {
    status = SPECIAL_STATUS[e.code] ?? KIND_STATUS[e.kind] ?? 500;
    code = status === 500 ? 'InternalError' : s3Code(e.code);
    if (status !== 500) message = e.message;
    if (e instanceof RangeNotSatisfiable) headers['Content-Range'] = `bytes */${e.size}`;
  }
  if (method === 'HEAD') return { status, headers };
  const body =
    `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${xmlEscape(message)}</Message>` +
    (key !== null ? `<Key>${xmlEscape(key)}</Key>` : '') +
    `<RequestId>${requestId}</RequestId></Error>`;
  return { status, headers: { ...headers, 'Content-Type': 'application/xml', 'Content-Length': String(Buffer.byteLength(body)) }, body };
}

function decodeKey(path: string): string {
  try {
    return path.split('/').map(decodeURIComponent).join('/');
  } catch {
    throw new AppError('bad_request', 'invalid_object_key', 'invalid percent-encoding in key');
  }
}

function objectHeaders(info: { size: number; etag?: string; contentType?: string; lastModified?: number }, disposition: string | null): Record<string, string> {
  const h: Record<string, string> = {
    'Content-Type': info.contentType ?? 'application/octet-stream',
    'Accept-Ranges': 'bytes',
  };
  if (info.etag) h['ETag'] = `"${info.etag}"`;
  if (info.lastModified !== undefined) h['Last-Modified'] = new Date(info.lastModified).toUTCString();
  if (disposition) h['Content-Disposition'] = disposition;
  return h;
}

/**
 * Serves one request to a signed local-store URL. `body` is the request body for PUT (consumed
 * chunk by chunk, awaiting the disk between chunks; null when there is none). When the response
 * comes back before the body was fully consumed (errors), the edge should close the connection
 * rather than drain a large upload.
 */
export async function handleLocalStorageRequest(
  store: LocalObjectStore,
  req: LocalStorageRequest,
  body: AsyncIterable<Buffer> | null,
): Promise<LocalStorageResponse> {
  const method = req.method.toUpperCase();
  let key: string | null = null;
  try {
    if (method !== 'GET' && method !== 'HEAD' && method !== 'PUT') {
      throw new AppError('bad_request', 'method_not_allowed', 'The specified method is not allowed against this resource.');
    }
    key = decodeKey(req.path.replace(/^\/+/, ''));
    const problem = keyProblem(key);
    if (problem !== null) throw new AppError('bad_request', 'invalid_object_key', `invalid object key: ${problem}`);
    store.verifyRequest(method, key, req.query, req.headers);

    if (method === 'PUT') {
      const cl = req.headers['content-length'];
      if (cl === undefined) throw new AppError('bad_request', 'missing_content_length', 'You must provide the Content-Length HTTP header.');
      if (!/^\d{1,16}$/.test(cl)) throw new AppError('bad_request', 'invalid_argument', 'Content-Length is not a valid integer');
      const contentLength = Number(cl);
      const uploadId = req.query.get(Q_UPLOAD_ID);
      const partNumber = req.query.get(Q_PART_NUMBER);
      if (uploadId !== null || partNumber !== null) {
        if (uploadId === null || partNumber === null || !/^\d{1,5}$/.test(partNumber)) {
          throw new AppError('bad_request', 'invalid_argument', 'Part uploads need both partNumber and uploadId');
        }
        const etag = await store.writePart(key, uploadId, Number(partNumber), body, contentLength);
        return { status: 200, headers: { ETag: `"${etag}"`, 'Content-Length': '0' }, body: '' };
      }
      const inm = req.headers['if-none-match'];
      if (inm !== undefined && inm.trim() !== '*') {
        throw new AppError('bad_request', 'not_implemented', 'Only If-None-Match: * is supported on PUT');
      }
      const ct = req.headers['content-type'];
      const info = await store.writeObject(key, body, {
        contentLength,
        ...(ct !== undefined && ct !== '' ? { contentType: ct } : {}),
        ifNoneMatch: inm !== undefined,
      });
      return { status: 200, headers: { ETag: `"${info.etag ?? ''}"`, 'Content-Length': '0' }, body: '' };
    }

    const disposition = req.query.get(Q_DISPOSITION);
    if (method === 'HEAD') {
      const info = await store.head(key);
      if (info === null) throw new AppError('not_found', 'no_such_key', 'The specified key does not exist.');
      return { status: 200, headers: { ...objectHeaders(info, disposition), 'Content-Length': String(info.size) } };
    }
    const range = req.headers['range'];
    const r = await store.openRead(key, range);
    const headers = objectHeaders(r.info, disposition);
    headers['Content-Length'] = String(r.info.size === 0 ? 0 : r.end - r.start + 1);
    if (r.partial) headers['Content-Range'] = `bytes ${r.start}-${r.end}/${r.info.size}`;
    return { status: r.partial ? 206 : 200, headers, stream: r.stream };
  } catch (e) {
    return errorResponse(e, method, key);
  }
}

/**
 * Turns a push-style request body (uWebSockets.js `res.onData((ab, isLast) => ...)`) into the
 * AsyncIterable<Buffer> handleLocalStorageRequest consumes, with backpressure: when more than
 * highWaterMark bytes are queued it calls pause() (uWS `res.pause()`), and resume() once the
 * consumer has drained below half of it. Chunks are copied on push (uWS reuses its ArrayBuffer).
 * Call fail() when the client aborts (uWS onAborted). After the consumer stops early (error
 * response), further pushes are discarded and resume() is called so the connection can be closed.
 */
export function createBodyChannel(o: { pause?: () => void; resume?: () => void; highWaterMark?: number } = {}): {
  push(chunk: ArrayBuffer | Uint8Array, isLast: boolean): void;
  fail(err: Error): void;
  readonly iterable: AsyncIterable<Buffer>;
} {
  const hwm = o.highWaterMark ?? 4 * 1024 * 1024;
  const queue: Buffer[] = [];
  let queued = 0;
  let ended = false;
  let abandoned = false;
  let paused = false;
  let error: Error | null = null;
  let wake: (() => void) | null = null;
  const notify = (): void => {
    const w = wake;
    wake = null;
    w?.();
  };
  const iterable: AsyncIterable<Buffer> = {
    [Symbol.asyncIterator](): AsyncIterator<Buffer> {
      return {
        async next(): Promise<IteratorResult<Buffer>> {
          for (;;) {
            const c = queue.shift();
            if (c !== undefined) {
              queued -= c.length;
              if (paused && queued <= hwm / 2) {
                paused = false;
                o.resume?.();
              }
              return { value: c, done: false };
            }
            if (error) throw error;
            if (ended) return { value: undefined, done: true };
            await new Promise<void>((r) => (wake = r));
          }
        },
        async return(): Promise<IteratorResult<Buffer>> {
          abandoned = true;
          queue.length = 0;
          queued = 0;
          if (paused) {
            paused = false;
            o.resume?.();
          }
          return { value: undefined, done: true };
        },
      };
    },
  };
  return {
    push(chunk, isLast) {
      if (!abandoned && !ended && chunk.byteLength > 0) {
        const b = Buffer.from(chunk instanceof Uint8Array ? chunk : new Uint8Array(chunk)); // copies
        queue.push(b);
        queued += b.length;
        if (!paused && queued > hwm) {
          paused = true;
          o.pause?.();
        }
      }
      if (isLast) ended = true;
      notify();
    },
    fail(err) {
      error = err;
      notify();
    },
    iterable,
  };
}
