/**
 * A real S3-compatible server for tests.
 *
 * startS3OrSkip():
 *   1. S3_TEST_ENDPOINT set -> use it (S3_TEST_ACCESS_KEY / S3_TEST_SECRET_KEY / S3_TEST_REGION,
 *      default GANTRYAK / GANTRYSK / us-east-1). CI can run `scripts/s3-up.sh` once and export
 *      S3_TEST_ENDPOINT=<its S3_ENDPOINT> so test files share one instance.
 *   2. else, radosgw installed -> start a throwaway single-node Ceph RGW (memstore) on free
 *      loopback ports in a temp dir via scripts/s3-up.sh (~13 s); it is stopped by stop(), at
 *      process exit, and by a watchdog if this process dies.
 *   3. else -> null; skip with `t.skip(s3SkipReason())`.
 * Each call creates a unique bucket; stop() empties and removes it (and the RGW it started).
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  S3Client,
} from '@aws-sdk/client-s3';
import { S3ObjectStore } from '../../src/storage/s3.js';

export interface S3TestServer {
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  bucket: string;
  /** 'external' (S3_TEST_ENDPOINT) or 'radosgw' (started here). */
  source: 'external' | 'radosgw';
  startMs: number;
  /** A store on this bucket (optionally under a key prefix). Closed by stop(). */
  store(prefix?: string): S3ObjectStore;
  stop(): Promise<void>;
}

const SCRIPT = fileURLToPath(new URL('../../scripts/s3-up.sh', import.meta.url));
let skipReason = 'S3 tests skipped: S3_TEST_ENDPOINT is unset and radosgw is not installed (run scripts/ci-install-s3.sh)';

export function s3SkipReason(): string {
  return skipReason;
}

function onPath(bin: string): boolean {
  if (existsSync(`/usr/bin/${bin}`)) return true;
  return (process.env.PATH ?? '').split(delimiter).some((d) => d !== '' && existsSync(join(d, bin)));
}

function parseEnv(out: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of out.split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (m && m[1]) env[m[1]] = m[2] ?? '';
  }
  return env;
}

let lastStderr = '';

function runScript(args: string[], env: Record<string, string>, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('bash', [SCRIPT, ...args], { env: { ...process.env, ...env }, timeout: timeoutMs, maxBuffer: 4 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`scripts/s3-up.sh ${args.join(' ')} failed: ${err.message}\n${stderr.slice(-4000)}`));
      else {
        lastStderr = stderr;
        resolve(stdout);
      }
    });
  });
}

export async function startS3OrSkip(): Promise<S3TestServer | null> {
  const t0 = Date.now();
  let endpoint: string;
  let accessKeyId: string;
  let secretAccessKey: string;
  let region: string;
  let source: S3TestServer['source'];
  let stopServer: () => void = () => undefined;

  if (process.env.S3_TEST_ENDPOINT) {
    endpoint = process.env.S3_TEST_ENDPOINT;
    accessKeyId = process.env.S3_TEST_ACCESS_KEY ?? 'GANTRYAK';
    secretAccessKey = process.env.S3_TEST_SECRET_KEY ?? 'GANTRYSK';
    region = process.env.S3_TEST_REGION ?? 'us-east-1';
    source = 'external';
  } else if (onPath('radosgw') && onPath('ceph-mon') && onPath('ceph-osd')) {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-rgw-'));
    const env = { S3_DIR: dir, S3_OWNER_PID: String(process.pid), S3_PORT: '0', S3_MON_PORT: '0', S3_MON_V1_PORT: '0' };
    let stopped = false;
    stopServer = () => {
      if (stopped) return;
      stopped = true;
      spawnSync('bash', [SCRIPT, 'down'], { env: { ...process.env, S3_DIR: dir }, stdio: 'ignore', timeout: 30_000 });
    };
    process.once('exit', stopServer);
    let out = '';
    for (let attempt = 1; ; attempt++) {
      try {
        out = await runScript(['up'], env, 90_000);
        if (process.env.S3_TEST_VERBOSE) console.error(lastStderr);
        break;
      } catch (e) {
        console.error(`[s3 helper] radosgw start attempt ${attempt} failed after ${Date.now() - t0} ms: ${String(e)}`);
        if (attempt >= 2) {
          stopServer();
          throw e; // radosgw is installed but does not start: fail loudly rather than skip
        }
      }
    }
    const vars = parseEnv(out);
    if (!vars.S3_ENDPOINT) throw new Error(`scripts/s3-up.sh printed no S3_ENDPOINT:\n${out}`);
    endpoint = vars.S3_ENDPOINT;
    accessKeyId = vars.S3_ACCESS_KEY ?? 'GANTRYAK';
    secretAccessKey = vars.S3_SECRET_KEY ?? 'GANTRYSK';
    region = vars.S3_REGION ?? 'us-east-1';
    source = 'radosgw';
  } else {
    skipReason = 'S3 tests skipped: S3_TEST_ENDPOINT is unset and radosgw is not installed (run scripts/ci-install-s3.sh)';
    return null;
  }

  const bucket = `gantry-test-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  const admin = new S3Client({ region, endpoint, forcePathStyle: true, credentials: { accessKeyId, secretAccessKey } });
  try {
    await admin.send(new CreateBucketCommand({ Bucket: bucket }));
  } catch (e) {
    admin.destroy();
    stopServer();
    throw e;
  }
  const stores: S3ObjectStore[] = [];
  return {
    endpoint,
    region,
    accessKeyId,
    secretAccessKey,
    bucket,
    source,
    startMs: Date.now() - t0,
    store(prefix?: string): S3ObjectStore {
      const s = new S3ObjectStore({ bucket, endpoint, region, accessKeyId, secretAccessKey, forcePathStyle: true, ...(prefix ? { prefix } : {}) });
      stores.push(s);
      return s;
    },
    async stop(): Promise<void> {
      if (source === 'external') {
        // leave the external server as we found it
        try {
          const r = await admin.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
          for (const u of r.Uploads ?? []) await admin.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: u.Key, UploadId: u.UploadId }));
          for (;;) {
            const page = await admin.send(new ListObjectsV2Command({ Bucket: bucket }));
            const keys = (page.Contents ?? []).flatMap((c) => (c.Key ? [c.Key] : []));
            if (keys.length === 0) break;
            for (const Key of keys) await admin.send(new DeleteObjectCommand({ Bucket: bucket, Key }));
          }
          await admin.send(new DeleteBucketCommand({ Bucket: bucket }));
        } catch {
          /* best effort */
        }
      }
      for (const s of stores) await s.close();
      admin.destroy();
      stopServer();
    },
  };
}

// ---------------------------------------------------------------- shared by the storage tests

/** A node:http(s) request with a streamed body (backpressured) and a streamed or buffered response. */
export async function httpRequest(
  url: string,
  o: { method: string; headers?: Record<string, string>; body?: Buffer | string | AsyncIterable<Buffer>; stream?: boolean },
): Promise<{ status: number; headers: Record<string, string>; body: Buffer; stream?: Readable }> {
  const u = new URL(url);
  const mod = u.protocol === 'https:' ? await import('node:https') : await import('node:http');
  const { pipeline } = await import('node:stream/promises');
  return new Promise((resolve, reject) => {
    const req = mod.request(u, { method: o.method, headers: o.headers ?? {}, agent: false }, (res) => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') headers[k] = v;
      if (o.stream) {
        resolve({ status: res.statusCode ?? 0, headers, body: Buffer.alloc(0), stream: res });
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    const b = o.body;
    if (b === undefined) req.end();
    else if (typeof b === 'string' || Buffer.isBuffer(b)) req.end(b);
    else pipeline(Readable.from(b), req).catch(() => undefined); // an early response may cut the upload
  });
}

const BLOCK = 1024 * 1024;
let pool: Buffer | null = null;

/**
 * Deterministic test data: byte range [start, end) of an endless stream of distinct 1 MiB blocks
 * (a fixed random pool stamped with the block index), yielded in slices of at most 1 MiB.
 */
export async function* patternChunks(start: number, end: number): AsyncGenerator<Buffer> {
  if (pool === null) pool = randomBytes(BLOCK);
  let off = start;
  while (off < end) {
    const blk = Math.floor(off / BLOCK);
    const b = Buffer.from(pool);
    b.writeUInt32BE(blk >>> 0, 0);
    b.writeUInt32BE((0x9e3779b9 ^ blk) >>> 0, 4);
    const from = off - blk * BLOCK;
    const to = Math.min(BLOCK, end - blk * BLOCK);
    yield b.subarray(from, to);
    off += to - from;
  }
}

export async function sha256Of(src: AsyncIterable<Buffer | Uint8Array | string>): Promise<{ hex: string; size: number }> {
  const { createHash } = await import('node:crypto');
  const h = createHash('sha256');
  let size = 0;
  for await (const c of src) {
    const b = typeof c === 'string' ? Buffer.from(c) : c;
    h.update(b);
    size += b.length;
  }
  return { hex: h.digest('hex'), size };
}
