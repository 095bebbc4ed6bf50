/**
 * The local object store's URL signatures (S3-style presigned requests, local.ts).
 *
 * Signing (query parameters, all covered by the signature):
 *   X-Gantry-Expires        expiry, epoch seconds
 *   X-Gantry-SignedHeaders  lowercase header names, `;`-separated, sorted
 *   uploadId, partNumber    for part uploads
 *   response-content-disposition  for GET with a download name
 *   X-Gantry-Signature      hex HMAC-SHA256(secret, canonical)
 * canonical = "GANTRY1-HMAC-SHA256\n<METHOD>\n<key>\n<sorted k=v of every other query param, &-joined>\n"
 *           + "<name>:<trimmed value>\n" for each signed header, in SignedHeaders order.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { PresignedRequest } from './port.js';
import { s3err } from './local-io.js';

export const SIG_ALGO = 'GANTRY1-HMAC-SHA256';
export const Q_EXPIRES = 'X-Gantry-Expires';
export const Q_SIGNED_HEADERS = 'X-Gantry-SignedHeaders';
export const Q_SIGNATURE = 'X-Gantry-Signature';
export const Q_UPLOAD_ID = 'uploadId';
export const Q_PART_NUMBER = 'partNumber';
export const Q_DISPOSITION = 'response-content-disposition';
/** Path prefix the edge mounts handleLocalStorageRequest at. */
export const LOCAL_STORAGE_PATH = '/storage/';

/** Encodes a key for a URL path, segment by segment. */
export function encodeKeyPath(key: string): string {
  return key.split('/').map(encodeURIComponent).join('/');
}

export function contentDisposition(name: string): string {
  const ascii = name.replace(/[^\x20-\x7e]/g, '_').replace(/["\\]/g, '_');
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(name).replace(/['()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase())}`;
}

function sign(secret: Buffer, method: string, key: string, query: URLSearchParams, headerLines: string[]): string {
  const entries: Array<[string, string]> = [];
  for (const [k, v] of query) if (k !== Q_SIGNATURE) entries.push([k, v]);
  entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  const q = entries.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');
  const canonical = `${SIG_ALGO}\n${method}\n${key}\n${q}\n${headerLines.map((l) => l + '\n').join('')}`;
  return createHmac('sha256', secret).update(canonical).digest('hex');
}

/** A presigned request: the URL (at `base`) with its expiry, signed header names and signature. */
export function presign(
  s: { secret: Buffer; base: string; nowMs: number },
  method: 'PUT' | 'GET',
  key: string,
  expiresInS: number,
  headers: Record<string, string>,
  extra: Record<string, string>,
): PresignedRequest {
  const expires = Math.floor(s.nowMs / 1000) + expiresInS;
  const names = Object.keys(headers).map((n) => n.toLowerCase()).sort();
  const lower: Record<string, string> = {};
  for (const [n, v] of Object.entries(headers)) lower[n.toLowerCase()] = v;
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(extra)) query.set(k, v);
  query.set(Q_EXPIRES, String(expires));
  query.set(Q_SIGNED_HEADERS, names.join(';'));
  query.set(Q_SIGNATURE, sign(s.secret, method, key, query, names.map((n) => `${n}:${(lower[n] ?? '').trim()}`)));
  return { url: `${s.base}${LOCAL_STORAGE_PATH}${encodeKeyPath(key)}?${query.toString()}`, headers, expiresAt: expires * 1000 };
}

/**
 * Checks a request against its URL signature (used by local-http). HEAD is accepted on a GET
 * URL. Throws AppError forbidden with code access_denied / signature_does_not_match.
 */
export function verifySignature(secret: Buffer, nowMs: number, method: string, key: string, query: URLSearchParams, headers: Record<string, string>): void {
  const sig = query.get(Q_SIGNATURE);
  const expiresRaw = query.get(Q_EXPIRES);
  const signedRaw = query.get(Q_SIGNED_HEADERS);
  if (sig === null || expiresRaw === null || signedRaw === null) {
    throw s3err('forbidden', 'access_denied', `Query-string authentication requires the ${Q_SIGNATURE}, ${Q_EXPIRES} and ${Q_SIGNED_HEADERS} parameters`);
  }
  if (!/^\d{1,12}$/.test(expiresRaw)) throw s3err('forbidden', 'access_denied', `${Q_EXPIRES} is not a valid epoch time`);
  if (nowMs > Number(expiresRaw) * 1000) throw s3err('forbidden', 'access_denied', 'Request has expired');
  const names = signedRaw === '' ? [] : signedRaw.split(';');
  const lines: string[] = [];
  for (const n of names) {
    const v = headers[n];
    if (v === undefined) {
      throw s3err('forbidden', 'signature_does_not_match', `There were headers signed in the request which were not present: ${n}. Send every header of the presigned request verbatim.`);
    }
    lines.push(`${n}:${v.trim()}`);
  }
  const m = method === 'HEAD' ? 'GET' : method;
  const want = Buffer.from(sign(secret, m, key, query, lines), 'hex');
  const got = /^[0-9a-f]{64}$/.test(sig) ? Buffer.from(sig, 'hex') : Buffer.alloc(0);
  if (got.length !== want.length || !timingSafeEqual(got, want)) {
    throw s3err(
      'forbidden',
      'signature_does_not_match',
      `The request signature we calculated does not match the signature you provided. Check the method and that the signed headers (${names.join(';') || 'none'}) are sent with their presigned values.`,
    );
  }
}
