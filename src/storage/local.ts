/**
 * The built-in local object store: objects are files under `rootDir`, handed out through URLs at
 * `${publicBaseUrl}/storage/<key>?...` that the edge serves with handleLocalStorageRequest
 * (local-http.ts). The URLs reproduce S3's presigned-request rules: every header returned with a
 * presigned request is signed and required, Content-Length must equal the presigned size,
 * `If-None-Match: *` gives 412 when the key exists, and the URL expires.
 *
 * Layout under rootDir:
 *   objects/<seg>/<seg>/<leaf>#data       object bytes (the `#` keeps files and key directories
 *   objects/<seg>/<seg>/<leaf>#meta.json  disjoint: `#` is not in the key alphabet)
 *   tmp/<random>.tmp                      in-flight writes; committed with link()/rename()
 *   uploads/<uploadId>/upload.json        multipart uploads: key, content type
 *   uploads/<uploadId>/<n>.part|<n>.json  part bytes and {etag,size}
 *
 * The parts, each in its module: URL signing (local-signing.ts), object I/O primitives (local-io.ts),
 * multipart upload files (local-multipart.ts).
 */
import { randomBytes } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import { dirname, join, relative, sep } from 'node:path';
import type { Readable } from 'node:stream';
import {
  MAX_PART_BYTES,
  MAX_SINGLE_PUT_BYTES,
  assertContentType,
  assertExpiry,
  assertKey,
  assertLength,
  assertPartNumber,
  assertPrefix,
} from './port.js';
import type { ObjectInfo, ObjectStore, PresignedRequest } from './port.js';
import { Q_DISPOSITION, Q_PART_NUMBER, Q_UPLOAD_ID, contentDisposition, presign, verifySignature } from './local-signing.js';
import { RangeNotSatisfiable, exists, isErrno, noSuchKey, noSuchUpload, parseRange, s3err, writeExactly } from './local-io.js';
import { UPLOAD_ID_RE, concatParts, multipartEtag, readParts, readUpload, type PartMeta } from './local-multipart.js';

export {
  LOCAL_STORAGE_PATH,
  Q_DISPOSITION,
  Q_EXPIRES,
  Q_PART_NUMBER,
  Q_SIGNATURE,
  Q_SIGNED_HEADERS,
  Q_UPLOAD_ID,
  SIG_ALGO,
  contentDisposition,
  encodeKeyPath,
} from './local-signing.js';
export { RangeNotSatisfiable, parseRange } from './local-io.js';

export interface LocalObjectStoreOptions {
  rootDir: string;
  /** Origin the edge is reachable at, e.g. http://127.0.0.1:8080 (no trailing slash needed). */
  publicBaseUrl: string;
  /** HMAC key for URL signatures (>= 16 bytes). */
  secret: Buffer;
  clock?: { now(): number };
}

const DATA_SUFFIX = '#data';
const META_SUFFIX = '#meta.json';

interface MetaFile {
  size: number;
  etag: string;
  contentType?: string;
}

export interface ReadResult {
  info: ObjectInfo;
  stream: Readable;
  /** Inclusive byte range served; [0, size-1] for a full read (empty for size 0). */
  start: number;
  end: number;
  partial: boolean;
}

export class LocalObjectStore implements ObjectStore {
  readonly driver = 'local' as const;
  readonly rootDir: string;
  private base: string;
  private readonly secret: Buffer;
  private readonly clock: { now(): number };
  private readonly objectsDir: string;
  private readonly tmpDir: string;
  private readonly uploadsDir: string;

  constructor(o: LocalObjectStoreOptions) {
    if (!Buffer.isBuffer(o.secret) || o.secret.length < 16) throw new Error('LocalObjectStore: secret must be a Buffer of at least 16 bytes');
    this.rootDir = o.rootDir;
    this.base = o.publicBaseUrl.replace(/\/+$/, '');
    this.secret = o.secret;
    this.clock = o.clock ?? { now: () => Date.now() };
    this.objectsDir = join(o.rootDir, 'objects');
    this.tmpDir = join(o.rootDir, 'tmp');
    this.uploadsDir = join(o.rootDir, 'uploads');
  }
  /** The edge's reachable origin, known only after it listens (port 0, no GANTRY_PUBLIC_URL). */
  setPublicBaseUrl(url: string): void {
    this.base = url.replace(/\/+$/, '');
  }

  // ---------------------------------------------------------------- signing

  private presign(method: 'PUT' | 'GET', key: string, expiresInS: number, headers: Record<string, string>, extra: Record<string, string>): PresignedRequest {
    return presign({ secret: this.secret, base: this.base, nowMs: this.clock.now() }, method, key, expiresInS, headers, extra);
  }

  /** Checks a request against its URL signature (used by local-http; verifySignature). */
  verifyRequest(method: string, key: string, query: URLSearchParams, headers: Record<string, string>): void {
    verifySignature(this.secret, this.clock.now(), method, key, query, headers);
  }

  // ---------------------------------------------------------------- paths

  private dataPath(key: string): string {
    return join(this.objectsDir, ...key.split('/')) + DATA_SUFFIX;
  }
  private metaPath(key: string): string {
    return join(this.objectsDir, ...key.split('/')) + META_SUFFIX;
  }
  private uploadDir(uploadId: string): string {
    if (!UPLOAD_ID_RE.test(uploadId)) throw noSuchUpload();
    return join(this.uploadsDir, uploadId);
  }
  /**
   * Directories this store created or found, so a write does not pay a recursive mkdir per
   * directory level each time. A directory pruned by a delete leaves the set; a write that still
   * meets ENOENT forgets it and creates it again.
   */
  private knownDirs = new Set<string>();

  private async ensureDir(dir: string): Promise<void> {
    if (this.knownDirs.has(dir)) return;
    await fsp.mkdir(dir, { recursive: true });
    if (this.knownDirs.size >= 10_000) this.knownDirs.clear();
    this.knownDirs.add(dir);
  }

  private forgetDirs(under: string): void {
    for (const d of this.knownDirs) if (d === under || d.startsWith(under + sep)) this.knownDirs.delete(d);
  }

  private async tmpFile(): Promise<string> {
    await this.ensureDir(this.tmpDir);
    return join(this.tmpDir, `${randomBytes(12).toString('hex')}.tmp`);
  }

  // ---------------------------------------------------------------- streaming write

  /** A fresh temp file with exactly `length` bytes of `body` (writeExactly): its path and md5 hex. */
  private async writeTemp(body: AsyncIterable<Buffer | Uint8Array | string> | Buffer | null, length: number): Promise<{ tmp: string; md5: string }> {
    const tmp = await this.tmpFile();
    return { tmp, md5: await writeExactly(tmp, body, length) };
  }

  /** Moves a finished temp file to the key; with ifNoneMatch the key must not exist (atomic via link()). */
  private async commit(tmp: string, key: string, meta: MetaFile, ifNoneMatch: boolean): Promise<void> {
    const dest = this.dataPath(key);
    try {
      for (let attempt = 0; ; attempt++) {
        await this.ensureDir(dirname(dest));
        try {
          if (ifNoneMatch) {
            try {
              await fsp.link(tmp, dest);
              await fsp.unlink(tmp); // (rm would lstat it first)
            } catch (e) {
              if (!isErrno(e, 'EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'EXDEV')) throw e;
              // filesystems without hard links: check-then-rename (not atomic, best effort)
              if (await exists(dest)) throw Object.assign(new Error('exists'), { code: 'EEXIST' });
              await fsp.rename(tmp, dest);
            }
          } else {
            await fsp.rename(tmp, dest);
          }
          break;
        } catch (e) {
          // a concurrent deletePrefix may have pruned the (empty) parent directory: retry once
          if (isErrno(e, 'ENOENT') && attempt < 2) {
            this.forgetDirs(dirname(dest));
            continue;
          }
          if (isErrno(e, 'EEXIST')) throw s3err('precondition_failed', 'precondition_failed', 'At least one of the pre-conditions you specified did not hold (If-None-Match: * and the object exists).');
          throw e;
        }
      }
    } catch (e) {
      await fsp.rm(tmp, { force: true }).catch(() => undefined);
      throw e;
    }
    await this.writeJson(this.metaPath(key), meta);
  }

  private async writeJson(path: string, v: unknown): Promise<void> {
    const tmp = await this.tmpFile();
    await fsp.writeFile(tmp, JSON.stringify(v));
    await this.ensureDir(dirname(path));
    try {
      await fsp.rename(tmp, path);
    } catch (e) {
      if (!isErrno(e, 'ENOENT')) throw e;
      // its directory was pruned meanwhile: create it again
      this.forgetDirs(dirname(path));
      await this.ensureDir(dirname(path));
      await fsp.rename(tmp, path);
    }
  }

  /** Used by local-http for a signed PUT; also the implementation of put(). */
  async writeObject(
    key: string,
    body: AsyncIterable<Buffer | Uint8Array | string> | Buffer | null,
    o: { contentLength: number; contentType?: string; ifNoneMatch?: boolean },
  ): Promise<ObjectInfo> {
    assertKey(key);
    assertLength(o.contentLength, MAX_SINGLE_PUT_BYTES, 'Content-Length');
    // If-None-Match is decided by commit's link(), atomically: no existence check first (it cost a
    // file-system call on every output PUT, to save a body's write only when the key already exists)
    const { tmp, md5 } = await this.writeTemp(body, o.contentLength);
    const meta: MetaFile = { size: o.contentLength, etag: md5, ...(o.contentType ? { contentType: o.contentType } : {}) };
    await this.commit(tmp, key, meta, o.ifNoneMatch === true);
    return { size: meta.size, etag: md5, ...(o.contentType ? { contentType: o.contentType } : {}), lastModified: this.clock.now() };
  }

  /** Used by local-http for a signed part PUT. Returns the part's etag (md5 hex, unquoted). */
  async writePart(key: string, uploadId: string, partNumber: number, body: AsyncIterable<Buffer | Uint8Array | string> | Buffer | null, contentLength: number): Promise<string> {
    assertKey(key);
    assertPartNumber(partNumber);
    assertLength(contentLength, MAX_PART_BYTES, 'Content-Length');
    const dir = this.uploadDir(uploadId);
    await readUpload(dir, key);
    const { tmp, md5 } = await this.writeTemp(body, contentLength);
    try {
      await fsp.rename(tmp, join(dir, `${partNumber}.part`));
    } catch (e) {
      await fsp.rm(tmp, { force: true }).catch(() => undefined);
      if (isErrno(e, 'ENOENT')) throw noSuchUpload();
      throw e;
    }
    await this.writeJson(join(dir, `${partNumber}.json`), { size: contentLength, etag: md5 } satisfies PartMeta);
    return md5;
  }

  // ---------------------------------------------------------------- reads

  private async readMeta(key: string, size: number): Promise<MetaFile | null> {
    try {
      const m = JSON.parse(await fsp.readFile(this.metaPath(key), 'utf8')) as MetaFile;
      return m.size === size ? m : null; // stale sidecar (overwrite in progress): ignore
    } catch {
      return null;
    }
  }

  /**
   * Opens the object for streaming (used by local-http and get()). The file is opened before it is
   * stat'ed so a concurrent overwrite never mixes two versions. `range` is an HTTP Range header
   * value; an unsatisfiable range throws invalid_range (416), a malformed or multi-range one is
   * ignored (full body), as S3 does.
   */
  async openRead(key: string, range?: string): Promise<ReadResult> {
    assertKey(key);
    let fh: fsp.FileHandle;
    try {
      fh = await fsp.open(this.dataPath(key), 'r');
    } catch (e) {
      if (isErrno(e, 'ENOENT', 'ENOTDIR', 'EISDIR')) throw noSuchKey();
      throw e;
    }
    try {
      const st = await fh.stat();
      const meta = await this.readMeta(key, st.size);
      const info: ObjectInfo = {
        size: st.size,
        ...(meta?.etag ? { etag: meta.etag } : {}),
        ...(meta?.contentType ? { contentType: meta.contentType } : {}),
        lastModified: Math.floor(st.mtimeMs),
      };
      let start = 0;
      let end = st.size - 1;
      let partial = false;
      const r = range === undefined ? null : parseRange(range, st.size);
      if (r === 'unsatisfiable') {
        throw new RangeNotSatisfiable(st.size);
      }
      if (r) {
        [start, end] = r;
        partial = true;
      }
      const stream = st.size === 0 ? fh.createReadStream() : fh.createReadStream({ start, end, highWaterMark: 256 * 1024 });
      return { info, stream, start, end, partial };
    } catch (e) {
      await fh.close().catch(() => undefined);
      throw e;
    }
  }

  // ---------------------------------------------------------------- ObjectStore

  async presignPut(key: string, o: { contentLength: number; contentType?: string; expiresInS: number }): Promise<PresignedRequest> {
    assertKey(key);
    assertLength(o.contentLength, MAX_SINGLE_PUT_BYTES, 'contentLength');
    assertContentType(o.contentType);
    assertExpiry(o.expiresInS);
    const headers: Record<string, string> = { 'Content-Length': String(o.contentLength), 'If-None-Match': '*' };
    if (o.contentType !== undefined) headers['Content-Type'] = o.contentType;
    return this.presign('PUT', key, o.expiresInS, headers, {});
  }

  async presignGet(key: string, o: { expiresInS: number; downloadName?: string }): Promise<string> {
    assertKey(key);
    assertExpiry(o.expiresInS);
    const extra: Record<string, string> = {};
    if (o.downloadName !== undefined && o.downloadName !== '') extra[Q_DISPOSITION] = contentDisposition(o.downloadName);
    return this.presign('GET', key, o.expiresInS, {}, extra).url;
  }

  async head(key: string): Promise<ObjectInfo | null> {
    assertKey(key);
    let st;
    try {
      st = await fsp.stat(this.dataPath(key));
    } catch (e) {
      if (isErrno(e, 'ENOENT', 'ENOTDIR')) return null;
      throw e;
    }
    if (!st.isFile()) return null;
    const meta = await this.readMeta(key, st.size);
    return {
      size: st.size,
      ...(meta?.etag ? { etag: meta.etag } : {}),
      ...(meta?.contentType ? { contentType: meta.contentType } : {}),
      lastModified: Math.floor(st.mtimeMs),
    };
  }

  async put(key: string, body: NodeJS.ReadableStream | Buffer, o: { contentLength: number; contentType?: string }): Promise<void> {
    assertContentType(o.contentType);
    await this.writeObject(key, body as AsyncIterable<Buffer> | Buffer, { contentLength: o.contentLength, ...(o.contentType ? { contentType: o.contentType } : {}) });
  }

  async get(key: string): Promise<NodeJS.ReadableStream> {
    return (await this.openRead(key)).stream;
  }

  async delete(key: string): Promise<void> {
    assertKey(key);
    await fsp.rm(this.dataPath(key), { force: true });
    await fsp.rm(this.metaPath(key), { force: true });
    await this.pruneDirs(dirname(this.dataPath(key)));
  }

  /** Removes empty directories from `dir` up to (not including) objects/. Best effort. */
  private async pruneDirs(dir: string): Promise<void> {
    let d = dir;
    while (d.startsWith(this.objectsDir + sep)) {
      try {
        await fsp.rmdir(d);
        this.forgetDirs(d);
      } catch {
        return;
      }
      d = dirname(d);
    }
  }

  /** Keys starting with prefix ('' = every key), unordered. */
  async listKeys(prefix: string): Promise<string[]> {
    if (prefix !== '') assertPrefix(prefix);
    const segs = prefix.split('/');
    const dirSegs = segs.slice(0, -1); // the last segment is a partial name (or '' after a trailing /)
    const start = join(this.objectsDir, ...dirSegs);
    const out: string[] = [];
    const walk = async (d: string): Promise<void> => {
      let ents;
      try {
        ents = await fsp.readdir(d, { withFileTypes: true });
      } catch (e) {
        if (isErrno(e, 'ENOENT', 'ENOTDIR')) return;
        throw e;
      }
      for (const ent of ents) {
        const p = join(d, ent.name);
        const rel = relative(this.objectsDir, p).split(sep).join('/');
        if (ent.isDirectory()) {
          if ((rel + '/').startsWith(prefix) || prefix.startsWith(rel + '/')) await walk(p);
        } else if (ent.name.endsWith(DATA_SUFFIX)) {
          const key = rel.slice(0, -DATA_SUFFIX.length);
          if (key.startsWith(prefix)) out.push(key);
        }
      }
    };
    await walk(start);
    return out;
  }

  async deletePrefix(prefix: string): Promise<number> {
    const keys = await this.listKeys(prefix);
    let n = 0;
    for (const k of keys) {
      await fsp.rm(this.dataPath(k), { force: true });
      await fsp.rm(this.metaPath(k), { force: true });
      n++;
    }
    const dirs = new Set(keys.map((k) => dirname(this.dataPath(k))));
    for (const d of [...dirs].sort((a, b) => b.length - a.length)) await this.pruneDirs(d);
    return n;
  }

  async createMultipart(key: string, o: { contentType?: string }): Promise<{ uploadId: string }> {
    assertKey(key);
    assertContentType(o.contentType);
    const uploadId = randomBytes(16).toString('hex');
    const dir = join(this.uploadsDir, uploadId);
    await fsp.mkdir(dir, { recursive: true });
    await fsp.writeFile(join(dir, 'upload.json'), JSON.stringify({ key, ...(o.contentType ? { contentType: o.contentType } : {}), initiated: this.clock.now() }));
    return { uploadId };
  }

  async presignPart(key: string, uploadId: string, partNumber: number, o: { contentLength?: number; expiresInS: number }): Promise<PresignedRequest> {
    assertKey(key);
    assertPartNumber(partNumber);
    assertExpiry(o.expiresInS);
    await readUpload(this.uploadDir(uploadId), key);
    const headers: Record<string, string> = {};
    if (o.contentLength !== undefined) {
      assertLength(o.contentLength, MAX_PART_BYTES, 'contentLength');
      headers['Content-Length'] = String(o.contentLength);
    }
    return this.presign('PUT', key, o.expiresInS, headers, { [Q_PART_NUMBER]: String(partNumber), [Q_UPLOAD_ID]: uploadId });
  }

  async completeMultipart(key: string, uploadId: string, parts: Array<{ partNumber: number; etag: string }>): Promise<ObjectInfo> {
    assertKey(key);
    const dir = this.uploadDir(uploadId);
    const upload = await readUpload(dir, key);
    if (parts.length === 0) throw s3err('bad_request', 'malformed_xml', 'You must specify at least one part.');
    const metas = await readParts(dir, parts);
    const total = metas.reduce((a, m) => a + m.size, 0);
    const { tmp } = await this.writeTemp(concatParts(dir, parts), total);
    const etag = multipartEtag(metas);
    const meta: MetaFile = { size: total, etag, ...(upload.contentType ? { contentType: upload.contentType } : {}) };
    await this.commit(tmp, key, meta, false);
    await fsp.rm(dir, { recursive: true, force: true });
    this.forgetDirs(dir);
    return { size: total, etag, ...(upload.contentType ? { contentType: upload.contentType } : {}), lastModified: this.clock.now() };
  }

  async abortMultipart(key: string, uploadId: string): Promise<void> {
    assertKey(key);
    const dir = this.uploadDir(uploadId);
    await readUpload(dir, key);
    await fsp.rm(dir, { recursive: true, force: true });
  }

  /**
   * Removes multipart uploads initiated more than maxAgeMs ago (store clock) and temp files of
   * interrupted writes older than that (file mtime). For a periodic sweeper; returns the count.
   */
  async sweepStale(maxAgeMs: number): Promise<number> {
    let n = 0;
    // uploads: by their initiation time on the store's clock
    const cutoff = this.clock.now() - maxAgeMs;
    for (const id of await fsp.readdir(this.uploadsDir).catch(() => [] as string[])) {
      const p = join(this.uploadsDir, id);
      try {
        const u = JSON.parse(await fsp.readFile(join(p, 'upload.json'), 'utf8')) as { initiated?: number };
        if (typeof u.initiated === 'number' && u.initiated >= cutoff) continue;
      } catch {
        /* unreadable: treat as stale */
      }
      await fsp.rm(p, { recursive: true, force: true });
      n++;
    }
    // temp files of interrupted writes: by file mtime (wall clock)
    const wallCutoff = Date.now() - maxAgeMs;
    for (const f of await fsp.readdir(this.tmpDir).catch(() => [] as string[])) {
      try {
        const st = await fsp.stat(join(this.tmpDir, f));
        if (st.mtimeMs < wallCutoff) {
          await fsp.rm(join(this.tmpDir, f), { force: true });
          n++;
        }
      } catch {
        /* raced with its owner */
      }
    }
    return n;
  }

  async close(): Promise<void> {
    /* nothing to release */
  }
}
