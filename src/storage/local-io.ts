/** Object I/O primitives of the local object store (local.ts): S3-style errors, exact-length writes, byte ranges. */
import { createHash } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import { AppError } from '../shared/errors.js';

export const WRITE_CHUNK = 1024 * 1024;

export const s3err = (kind: AppError['kind'], code: string, message: string): AppError => new AppError(kind, code, message);
export const noSuchKey = (): AppError => s3err('not_found', 'no_such_key', 'The specified key does not exist.');
export const noSuchUpload = (): AppError =>
  s3err('not_found', 'no_such_upload', 'The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.');

/** 416: the requested range lies outside the object; the answer's Content-Range names the object's size. */
export class RangeNotSatisfiable extends AppError {
  constructor(readonly size: number) {
    super('bad_request', 'invalid_range', 'The requested range is not satisfiable');
  }
}

export function isErrno(e: unknown, ...codes: string[]): boolean {
  return typeof e === 'object' && e !== null && 'code' in e && codes.includes(String((e as { code: unknown }).code));
}

/**
 * Writes exactly `length` bytes from `body` to the fresh temp file `tmp`, chunk by chunk (each write is
 * awaited, so a fast producer is held back by the disk). Returns the md5 hex.
 * On any failure (short body, long body, I/O) the temp file is removed.
 */
export async function writeExactly(tmp: string, body: AsyncIterable<Buffer | Uint8Array | string> | Buffer | null, length: number): Promise<string> {
  const fh = await fsp.open(tmp, 'wx', 0o644);
  const hash = createHash('md5');
  let size = 0;
  let ok = false;
  try {
    // small chunks (node:http gives 64 KiB) are gathered into ~1 MiB writev calls; at most
    // WRITE_CHUNK bytes are held, and the producer waits for each write to finish.
    let pending: Uint8Array[] = [];
    let pendingBytes = 0;
    const flush = async (): Promise<void> => {
      if (pendingBytes === 0) return;
      const bufs = pending;
      const total = pendingBytes;
      pending = [];
      pendingBytes = 0;
      let done = 0;
      while (done < total) {
        const { bytesWritten } = await fh.writev(done === 0 ? bufs : sliceAll(bufs, done));
        done += bytesWritten;
      }
    };
    const write = async (b: Buffer | Uint8Array): Promise<void> => {
      if (size + b.length > length) {
        throw s3err('bad_request', 'invalid_request', `The request body is longer than its Content-Length (${length} bytes).`);
      }
      hash.update(b);
      size += b.length;
      pending.push(b);
      pendingBytes += b.length;
      if (pendingBytes >= WRITE_CHUNK) await flush();
    };
    if (Buffer.isBuffer(body)) await write(body);
    else if (body !== null) for await (const c of body) await write(typeof c === 'string' ? Buffer.from(c) : c);
    await flush();
    if (size !== length) {
      throw s3err('bad_request', 'incomplete_body', `You did not provide the number of bytes specified by the Content-Length HTTP header (${size} of ${length}).`);
    }
    ok = true;
  } finally {
    await fh.close().catch(() => undefined);
    if (!ok) await fsp.rm(tmp, { force: true }).catch(() => undefined);
  }
  return hash.digest('hex');
}

/** The buffers after skipping `skip` bytes (after a partial writev). */
function sliceAll(bufs: Uint8Array[], skip: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const b of bufs) {
    if (skip >= b.length) {
      skip -= b.length;
      continue;
    }
    out.push(skip > 0 ? b.subarray(skip) : b);
    skip = 0;
  }
  return out;
}


export async function exists(p: string): Promise<boolean> {
  try {
    await fsp.access(p);
    return true;
  } catch {
    return false;
  }
}

/** Parses a single `bytes=` range. null: ignore (serve all); 'unsatisfiable': 416. */
export function parseRange(h: string, size: number): [number, number] | null | 'unsatisfiable' {
  const m = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(h);
  if (!m) return null; // malformed or multiple ranges
  const a = m[1] ?? '';
  const b = m[2] ?? '';
  if (a === '' && b === '') return null;
  if (a === '') {
    const n = Number(b);
    if (n === 0) return 'unsatisfiable';
    if (size === 0) return 'unsatisfiable';
    return [Math.max(0, size - n), size - 1];
  }
  const start = Number(a);
  if (start >= size) return 'unsatisfiable';
  const end = b === '' ? size - 1 : Math.min(Number(b), size - 1);
  if (end < start) return null;
  return [start, end];
}
