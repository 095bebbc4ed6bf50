/**
 * The local object store's write of a small object (at most SMALL_OBJECT_BYTES: a task's image, a
 * JSON result): the body is gathered in memory, then written with synchronous file calls on the
 * event loop — a temp file (open/write/close), link() or rename() to the key, the meta sidecar —
 * instead of about a dozen thread-pool round trips (each a wake-up of a pool thread and a
 * continuation on the loop). For a few KiB on a local disk these calls take microseconds; larger
 * bodies keep the streamed asynchronous path (local.ts writeTemp/commit). Same rules as that path:
 * the object appears at its key only complete (temp + link/rename), If-None-Match: * is atomic
 * (link() fails with EEXIST), a body shorter or longer than its Content-Length writes nothing.
 */
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import { dirname, join, sep } from 'node:path';
import { isErrno, s3err } from './local-io.js';

/** Objects up to this size take the synchronous path. */
export const SMALL_OBJECT_BYTES = 256 * 1024;

/**
 * Directories the store created or found, so a write does not pay a recursive mkdir per directory
 * level each time. A directory pruned by a delete leaves the set; a write that still meets ENOENT
 * forgets it and creates it again.
 */
export class KnownDirs {
  private readonly known = new Set<string>();

  async ensure(dir: string): Promise<void> {
    if (this.known.has(dir)) return;
    await fsp.mkdir(dir, { recursive: true });
    this.add(dir);
  }

  ensureSync(dir: string): void {
    if (this.known.has(dir)) return;
    fs.mkdirSync(dir, { recursive: true });
    this.add(dir);
  }

  forget(under: string): void {
    for (const d of this.known) if (d === under || d.startsWith(under + sep)) this.known.delete(d);
  }

  private add(dir: string): void {
    if (this.known.size >= 10_000) this.known.clear();
    this.known.add(dir);
  }
}

export interface SmallWriteTarget {
  tmpDir: string;
  dataPath: string;
  metaPath: string;
  dirs: KnownDirs;
}

const preconditionFailed = (): Error =>
  s3err('precondition_failed', 'precondition_failed', 'At least one of the pre-conditions you specified did not hold (If-None-Match: * and the object exists).');

/** Exactly `length` bytes of the body in one buffer (the same errors as writeExactly). */
export async function gatherSmall(body: AsyncIterable<Buffer | Uint8Array | string> | Buffer | null, length: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  const add = (b: Buffer): void => {
    if (size + b.length > length) throw s3err('bad_request', 'invalid_request', `The request body is longer than its Content-Length (${length} bytes).`);
    size += b.length;
    chunks.push(b);
  };
  if (Buffer.isBuffer(body)) add(body);
  else if (body !== null) for await (const c of body) add(typeof c === 'string' ? Buffer.from(c) : Buffer.isBuffer(c) ? c : Buffer.from(c.buffer, c.byteOffset, c.byteLength));
  if (size !== length) {
    throw s3err('bad_request', 'incomplete_body', `You did not provide the number of bytes specified by the Content-Length HTTP header (${size} of ${length}).`);
  }
  return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
}

/**
 * Writes `data` to the key's data file and its meta sidecar; returns the md5 hex. The meta of a
 * new key (If-None-Match: *) is created in place (a reader meets the data file before its meta
 * either way and treats a missing or partial one as absent); an overwrite replaces it by rename.
 */
export function writeSmallSync(t: SmallWriteTarget, data: Buffer, meta: { contentType?: string }, ifNoneMatch: boolean): string {
  const md5 = createHash('md5').update(data).digest('hex');
  t.dirs.ensureSync(t.tmpDir);
  const tmp = join(t.tmpDir, `${randomBytes(12).toString('hex')}.tmp`);
  fs.writeFileSync(tmp, data, { flag: 'wx', mode: 0o644 });
  try {
    for (let attempt = 0; ; attempt++) {
      t.dirs.ensureSync(dirname(t.dataPath));
      try {
        if (ifNoneMatch) linkOnce(tmp, t.dataPath);
        else fs.renameSync(tmp, t.dataPath);
        break;
      } catch (e) {
        // a concurrent deletePrefix may have pruned the (empty) parent directory: retry
        if (isErrno(e, 'ENOENT') && attempt < 2) {
          t.dirs.forget(dirname(t.dataPath));
          continue;
        }
        if (isErrno(e, 'EEXIST')) throw preconditionFailed();
        throw e;
      }
    }
  } catch (e) {
    rmQuiet(tmp);
    throw e;
  }
  const json = JSON.stringify({ size: data.length, etag: md5, ...(meta.contentType ? { contentType: meta.contentType } : {}) });
  if (ifNoneMatch) {
    try {
      fs.writeFileSync(t.metaPath, json, { flag: 'wx', mode: 0o644 });
      return md5;
    } catch (e) {
      if (!isErrno(e, 'EEXIST')) throw e;
      // a stale sidecar (an earlier object's, left by a crash): replaced below
    }
  }
  const mtmp = join(t.tmpDir, `${randomBytes(12).toString('hex')}.tmp`);
  fs.writeFileSync(mtmp, json, { mode: 0o644 });
  try {
    fs.renameSync(mtmp, t.metaPath);
  } catch (e) {
    rmQuiet(mtmp);
    throw e;
  }
  return md5;
}

/** link(tmp, dest) then unlink(tmp); without hard links: check-then-rename (not atomic, best effort). */
function linkOnce(tmp: string, dest: string): void {
  try {
    fs.linkSync(tmp, dest);
  } catch (e) {
    if (!isErrno(e, 'EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'EXDEV')) throw e;
    if (fs.existsSync(dest)) throw Object.assign(new Error('exists'), { code: 'EEXIST' });
    fs.renameSync(tmp, dest);
    return;
  }
  rmQuiet(tmp);
}

function rmQuiet(p: string): void {
  try {
    fs.unlinkSync(p);
  } catch {
    /* already gone */
  }
}
