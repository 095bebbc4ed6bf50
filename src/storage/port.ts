import { AppError } from '../shared/errors.js';

/**
 * The object store port. Two drivers implement it: `local` (files under the data directory, served
 * by the edge at signed URLs that reproduce S3's presigned-request rules; see local.ts and
 * local-http.ts) and `s3` (any S3-compatible store; see s3.ts).
 *
 * Keys are opaque, `/`-separated strings chosen by the domain layer (e.g.
 * `teams/<team>/inputs/<id>/<file_name>`); both drivers accept the same key alphabet (see
 * `validateKey`). Errors are AppErrors: not_found for a missing object or upload, bad_request for
 * invalid keys/arguments/parts, precondition_failed when If-None-Match finds an existing object.
 */
export interface PresignedRequest {
  url: string;
  /** Every header here is signed and must be sent verbatim (names as given). */
  headers: Record<string, string>;
  /** Epoch milliseconds after which the URL is refused. */
  expiresAt: number;
}

export interface ObjectInfo {
  size: number;
  /** Unquoted; md5 hex for single-part objects, `<md5-of-md5s>-<parts>` for multipart ones. */
  etag?: string;
  contentType?: string;
  /** Epoch milliseconds. */
  lastModified?: number;
}

export interface ObjectStore {
  readonly driver: 'local' | 's3';
  /** Presigned single-part PUT; always signs Content-Length and `If-None-Match: *` (and Content-Type when given). */
  presignPut(key: string, o: { contentLength: number; contentType?: string; expiresInS: number }): Promise<PresignedRequest>;
  /** Presigned GET; downloadName sets Content-Disposition: attachment on the response. */
  presignGet(key: string, o: { expiresInS: number; downloadName?: string }): Promise<string>;
  head(key: string): Promise<ObjectInfo | null>;
  /** Server-side streaming write (overwrites). The body must carry exactly contentLength bytes. */
  put(key: string, body: NodeJS.ReadableStream | Buffer, o: { contentLength: number; contentType?: string }): Promise<void>;
  /** Streaming read; AppError not_found if missing. */
  get(key: string): Promise<NodeJS.ReadableStream>;
  /** Idempotent: deleting a missing key succeeds. */
  delete(key: string): Promise<void>;
  /** Every key starting with prefix (plain string prefix, as S3; '' = every key), unordered: `gantry backup`'s object manifest. */
  listKeys(prefix: string): Promise<string[]>;
  /** Deletes every object whose key starts with prefix (plain string prefix, as S3); returns the count. */
  deletePrefix(prefix: string): Promise<number>;
  createMultipart(key: string, o: { contentType?: string }): Promise<{ uploadId: string }>;
  presignPart(key: string, uploadId: string, partNumber: number, o: { contentLength?: number; expiresInS: number }): Promise<PresignedRequest>;
  completeMultipart(key: string, uploadId: string, parts: Array<{ partNumber: number; etag: string }>): Promise<ObjectInfo>;
  abortMultipart(key: string, uploadId: string): Promise<void>;
  close?(): Promise<void>;
}

/** S3 limits, enforced by both drivers so the local store fails where S3 would. */
export const MAX_SINGLE_PUT_BYTES = 5 * 1024 ** 3;
export const MAX_PART_BYTES = 5 * 1024 ** 3;
export const MIN_PART_BYTES = 5 * 1024 ** 2;
export const MAX_PARTS = 10_000;
export const MAX_PRESIGN_EXPIRY_S = 7 * 24 * 3600;
export const MAX_KEY_BYTES = 1024;

const SEGMENT_RE = /^[A-Za-z0-9._\-=@+,!()~]+$/;

/**
 * The key alphabet shared by both drivers: `/`-separated non-empty segments of
 * `A-Z a-z 0-9 . _ - = @ + , ! ( ) ~`, no `.`/`..` segments, no leading or trailing `/`, at most
 * 1024 bytes. Returns an error message or null.
 */
export function keyProblem(key: string): string | null {
  if (typeof key !== 'string' || key.length === 0) return 'key must be a non-empty string';
  if (Buffer.byteLength(key) > MAX_KEY_BYTES) return `key longer than ${MAX_KEY_BYTES} bytes`;
  if (key.startsWith('/')) return 'key must not start with /';
  if (key.endsWith('/')) return 'key must not end with /';
  for (const seg of key.split('/')) {
    if (seg === '') return 'key must not contain empty segments (//)';
    if (seg === '.' || seg === '..') return 'key must not contain . or .. segments';
    if (seg.length > 200) return 'key segment longer than 200 characters';
    if (!SEGMENT_RE.test(seg)) return 'key contains characters outside A-Z a-z 0-9 . _ - = @ + , ! ( ) ~';
  }
  return null;
}

/** A prefix for deletePrefix/listing: same alphabet, may end with `/`, may be empty only if allowEmpty. */
export function prefixProblem(prefix: string): string | null {
  if (typeof prefix !== 'string' || prefix.length === 0) return 'prefix must be a non-empty string';
  const trimmed = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
  if (trimmed === '') return 'prefix must not be /';
  return keyProblem(trimmed);
}

export function stripQuotes(etag: string): string {
  const t = etag.trim();
  return t.length >= 2 && t.startsWith('"') && t.endsWith('"') ? t.slice(1, -1) : t;
}

// ---- shared argument checks (both drivers) ----

export function assertKey(key: string): void {
  const p = keyProblem(key);
  if (p !== null) throw new AppError('bad_request', 'invalid_object_key', `invalid object key: ${p}`);
}

export function assertPrefix(prefix: string): void {
  const p = prefixProblem(prefix);
  if (p !== null) throw new AppError('bad_request', 'invalid_object_key', `invalid object key prefix: ${p}`);
}

export function assertExpiry(expiresInS: number): void {
  if (!Number.isInteger(expiresInS) || expiresInS < 1 || expiresInS > MAX_PRESIGN_EXPIRY_S) {
    throw new AppError('bad_request', 'invalid_argument', `expiresInS must be an integer between 1 and ${MAX_PRESIGN_EXPIRY_S}`);
  }
}

export function assertLength(n: number, max: number, what: string): void {
  if (!Number.isSafeInteger(n) || n < 0) throw new AppError('bad_request', 'invalid_argument', `${what} must be a non-negative integer`);
  if (n > max) throw new AppError('bad_request', 'entity_too_large', `${what} ${n} exceeds the maximum of ${max} bytes`);
}

export function assertPartNumber(n: number): void {
  if (!Number.isInteger(n) || n < 1 || n > MAX_PARTS) throw new AppError('bad_request', 'invalid_argument', `partNumber must be an integer between 1 and ${MAX_PARTS}`);
}

/** Content-Type values end up in signed headers and response headers: printable ASCII only. */
export function assertContentType(ct: string | undefined): void {
  if (ct === undefined) return;
  if (ct.length === 0 || ct.length > 255 || !/^[\x20-\x7e]+$/.test(ct)) {
    throw new AppError('bad_request', 'invalid_argument', 'content type must be 1-255 printable ASCII characters');
  }
}
