/**
 * Model and custom node sync, agent side (docs/api.md "Model and custom node sync").
 *
 * A sync fetches the team's manifest (GetSyncManifest: every active model and custom node package
 * with a presigned download URL) and makes the disk match it:
 *  - a model is present when <models dir>/<model_path> has the manifest's size and SHA-256 (the
 *    hash of a file is computed once and remembered in <models dir>/.gantry-sync.json by size and
 *    mtime); otherwise it is downloaded, streamed to a temporary file under <models dir>/.gantry-tmp
 *    while hashing, checked (size, SHA-256) and renamed into place (directories created);
 *  - a custom node package is present when <custom nodes dir>/<package_name> exists and
 *    <custom nodes dir>/.gantry-sync.json says it was installed from this version and SHA-256;
 *    otherwise the archive is downloaded and checked the same way, unpacked (zip: `unzip`, else
 *    `python3 -m zipfile`; tar/tar.gz: `tar`) into a temporary directory, descended through a single
 *    top-level folder and moved to <custom nodes dir>/<package_name> (replacing what was there). An
 *    archive of another format is placed as the file <package_name>/<package_name>.pkg.
 * Paths from the manifest are never trusted: a model_path that breaks the rule the server applies
 * at the API (src/protocol/model-path.ts), a package_name that is not a single directory name, or
 * anything that resolves outside its root is refused.
 *
 * Entries are processed one by one; one failing does not stop the others and does not fail the
 * sync: it is skipped, logged (a warning when the set of skipped entries changes) and listed in
 * the report. Provisioning a task (provision()) fails only when a model the task's workflow
 * requires (the assignment's required_models) was skipped, or when the manifest could not be
 * fetched at all; a bad model never fails a task that does not need it. Models that are no
 * longer in the manifest (disabled or deleted) are left alone: they just stop being required.
 * After every sync the caller reports the rescanned inventory; custom nodes installed by sync are
 * reported as `<package_name>@<node_version>` (what the server's needsSync compares), other entries
 * of the custom nodes dir by name.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import type { Logger } from '../shared/logger.js';
import type { SyncManifest__Output } from '../gen/gantry/agent/v1/SyncManifest.js';
import type { SyncModel__Output } from '../gen/gantry/agent/v1/SyncModel.js';
import type { SyncCustomNode__Output } from '../gen/gantry/agent/v1/SyncCustomNode.js';
import { scanCustomNodes } from './discovery.js';
import { modelPathProblem, NODE_VERSION_RE, PACKAGE_NAME_RE } from '../protocol/model-path.js';

export const SYNC_STATE_FILE = '.gantry-sync.json';
export const SYNC_TMP_DIR = '.gantry-tmp';

export class SyncError extends Error {}

const SHA256_RE = /^[a-f0-9]{64}$/;

/**
 * <root>/<rel> for a manifest path, or a SyncError when rel could land anywhere else: absolute,
 * backslashes, NUL, empty / `.` / `..` segments, or a resolved path outside root.
 */
export function resolveInside(root: string, rel: string, what: string): string {
  const bad = (why: string): SyncError => new SyncError(`${what} ${JSON.stringify(rel)} refused: ${why}`);
  if (typeof rel !== 'string' || rel.length === 0 || rel.length > 1024) throw bad('must be 1-1024 characters');
  if (rel.includes('\\') || rel.includes('\0')) throw bad('must not contain a backslash or NUL');
  if (rel.startsWith('/') || path.isAbsolute(rel)) throw bad('must be relative');
  const segs = rel.split('/');
  if (segs.some((s) => s === '' || s === '.' || s === '..')) throw bad('must not have empty, . or .. segments');
  const base = path.resolve(root);
  const dest = path.resolve(base, ...segs);
  if (dest === base || !dest.startsWith(base + path.sep)) throw bad('escapes its directory');
  if (segs[0] === SYNC_TMP_DIR || (segs.length === 1 && segs[0] === SYNC_STATE_FILE)) throw bad('is reserved for the agent');
  return dest;
}

interface ModelState {
  size: number;
  mtimeMs: number;
  sha256: string;
}

interface NodeState {
  node_version: string;
  sha256: string;
}

interface StateFile<T> {
  version: 1;
  entries: Record<string, T>;
}

async function readState<T>(dir: string): Promise<StateFile<T>> {
  try {
    const j = JSON.parse(await readFile(path.join(dir, SYNC_STATE_FILE), 'utf8')) as StateFile<T>;
    if (j && j.version === 1 && j.entries && typeof j.entries === 'object') return j;
  } catch {
    /* absent or unreadable: start over (models are re-hashed once) */
  }
  return { version: 1, entries: {} };
}

async function writeState<T>(dir: string, s: StateFile<T>): Promise<void> {
  const file = path.join(dir, SYNC_STATE_FILE);
  const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, `${JSON.stringify(s, null, 1)}\n`);
  await rename(tmp, file);
}

/** SHA-256 (hex) of a file, streamed. */
export async function sha256File(file: string, signal?: AbortSignal): Promise<string> {
  const h = createHash('sha256');
  for await (const c of createReadStream(file, { highWaterMark: 1024 * 1024 })) {
    h.update(c as Buffer);
    if (signal?.aborted) throw signal.reason ?? new Error('aborted');
  }
  return h.digest('hex');
}

/**
 * GET url -> dest, hashing on the way; fails on HTTP errors, a size other than `size`, a SHA-256
 * other than `sha256`, or no bytes for idleTimeoutMs. Removes dest on failure.
 */
export async function downloadVerified(url: string, dest: string, size: number, sha256: string, o: { signal?: AbortSignal; idleTimeoutMs?: number } = {}): Promise<void> {
  const idle = new AbortController();
  const signals = [idle.signal, ...(o.signal ? [o.signal] : [])];
  const idleMs = o.idleTimeoutMs ?? 120_000;
  let timer: NodeJS.Timeout = setTimeout(() => idle.abort(new SyncError(`no data for ${idleMs / 1000} s`)), idleMs);
  const touch = (): void => {
    clearTimeout(timer);
    timer = setTimeout(() => idle.abort(new SyncError(`no data for ${idleMs / 1000} s`)), idleMs);
  };
  const h = createHash('sha256');
  let n = 0;
  try {
    let res: Response;
    try {
      res = await fetch(url, { signal: AbortSignal.any(signals) });
    } catch (e) {
      throw new SyncError(`download failed: ${idle.signal.aborted ? (idle.signal.reason as Error).message : (e as Error).message}`);
    }
    if (!res.ok || !res.body) {
      await res.arrayBuffer().catch(() => undefined);
      throw new SyncError(`download failed: HTTP ${res.status}`);
    }
    const declared = Number(res.headers.get('content-length') ?? NaN);
    if (Number.isFinite(declared) && declared !== size) {
      await res.body.cancel().catch(() => undefined);
      throw new SyncError(`size mismatch: the server sends ${declared} bytes, the manifest says ${size}`);
    }
    const meter = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        n += chunk.length;
        touch();
        if (n > size) return cb(new SyncError(`size mismatch: more than the manifest's ${size} bytes`));
        h.update(chunk);
        cb(null, chunk);
      },
    });
    try {
      await pipeline(Readable.fromWeb(res.body as unknown as NodeReadableStream<Uint8Array>), meter, createWriteStream(dest, { mode: 0o644 }));
    } catch (e) {
      if (e instanceof SyncError) throw e;
      throw new SyncError(`download failed: ${idle.signal.aborted ? (idle.signal.reason as Error).message : (e as Error).message}`);
    }
    if (n !== size) throw new SyncError(`size mismatch: got ${n} bytes, the manifest says ${size}`);
    const got = h.digest('hex');
    if (got !== sha256) throw new SyncError(`checksum mismatch: SHA-256 ${got}, the manifest says ${sha256}`);
  } catch (e) {
    await rm(dest, { force: true }).catch(() => undefined);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

type ArchiveKind = 'zip' | 'tar.gz' | 'tar' | 'unknown';

async function archiveKind(file: string): Promise<ArchiveKind> {
  const fh = await open(file, 'r');
  try {
    const b = Buffer.alloc(512);
    const { bytesRead } = await fh.read(b, 0, 512, 0);
    if (bytesRead >= 4 && b[0] === 0x50 && b[1] === 0x4b && (b[2] === 0x03 || b[2] === 0x05) && (b[3] === 0x04 || b[3] === 0x06)) return 'zip';
    if (bytesRead >= 2 && b[0] === 0x1f && b[1] === 0x8b) return 'tar.gz';
    if (bytesRead >= 262 && b.toString('latin1', 257, 262) === 'ustar') return 'tar';
    return 'unknown';
  } finally {
    await fh.close();
  }
}

const run = (cmd: string, args: string[], timeoutMs = 10 * 60_000): Promise<void> =>
  new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, windowsHide: true, maxBuffer: 4 * 1024 * 1024 }, (err, _out, stderr) => {
      if (err) reject(new Error(`${path.basename(cmd)}: ${String(stderr).trim().split('\n').slice(-3).join(' ') || err.message}`));
      else resolve();
    });
  });

/** Unpacks a package archive into dest (an empty directory); returns the directory to install. */
async function unpack(archive: string, dest: string, packageName: string): Promise<string> {
  const kind = await archiveKind(archive);
  if (kind === 'zip') {
    try {
      await run('unzip', ['-q', '-o', archive, '-d', dest]);
    } catch (e) {
      try {
        await run('python3', ['-m', 'zipfile', '-e', archive, dest]);
      } catch (e2) {
        throw new SyncError(`could not unpack the zip archive (${(e as Error).message}; ${(e2 as Error).message})`);
      }
    }
  } else if (kind === 'tar.gz' || kind === 'tar') {
    try {
      // GNU tar refuses members with .. and strips leading /; no owners or permissions from the archive
      await run('tar', [kind === 'tar.gz' ? '-xzf' : '-xf', archive, '-C', dest, '--no-same-owner', '--no-same-permissions']);
    } catch (e) {
      throw new SyncError(`could not unpack the tar archive (${(e as Error).message})`);
    }
  } else {
    await rename(archive, path.join(dest, `${packageName}.pkg`));
    return dest;
  }
  // descend through a single top-level folder (GitHub-style archives: Repo-main/...)
  let root = dest;
  for (let i = 0; i < 4; i++) {
    const entries = (await readdir(root, { withFileTypes: true })).filter((e) => e.name !== '__MACOSX');
    const only = entries[0];
    if (entries.length === 1 && only && only.isDirectory()) root = path.join(root, only.name);
    else break;
  }
  return root;
}

/** A manifest entry this sync could not place (refused path, failed download, checksum...). */
export interface SyncSkip {
  kind: 'model' | 'custom_node';
  /** model_path, or package_name for a custom node. */
  name: string;
  error: string;
}

export interface SyncReport {
  /** Model paths and package names downloaded by this sync. */
  downloaded: string[];
  /** Entries already present. */
  present: number;
  /** Entries skipped (each one logged); the rest of the manifest was synced. */
  skipped: SyncSkip[];
}

export interface SyncerOptions {
  modelsDir: string | undefined;
  customNodesDir: string | undefined;
  fetchManifest(): Promise<SyncManifest__Output>;
  /** Called after every sync (also a failed one) with nothing pending: rescan and report the inventory. */
  afterSync(): Promise<void>;
  logger: Logger;
  idleTimeoutMs?: number;
}

export class ModelSyncer {
  private running: Promise<SyncReport> | null = null;
  private next: Promise<SyncReport> | null = null;
  private readonly abort = new AbortController();
  /** Completed syncs (tests, logs). */
  syncs = 0;
  /** The previous sync's skipped entries (a warning is logged when they change). */
  private lastSkipped = '[]';

  constructor(private readonly o: SyncerOptions) {}

  /**
   * A sync that starts after this call: joins the one already queued, or queues one behind the one
   * running (whose manifest may predate the reason for asking). Entries that could not be synced
   * are listed in the report's skipped; rejects (SyncError) only when the manifest could not be fetched.
   */
  request(): Promise<SyncReport> {
    if (!this.running) {
      const p = this.runOnce().finally(() => {
        if (this.running === p) this.running = null;
      });
      this.running = p;
      return p;
    }
    if (!this.next) {
      const after = this.running;
      this.next = after
        .catch(() => undefined)
        .then(() => {
          this.next = null;
          return this.request();
        });
    }
    return this.next;
  }

  /**
   * Provisioning for a task: a sync that starts after this call; rejects (SyncError) when the
   * manifest could not be fetched or a model in requiredModels was skipped. Other skipped entries
   * do not concern this task (they were logged by the sync).
   */
  async provision(requiredModels: readonly string[]): Promise<SyncReport> {
    const r = await this.request();
    const need = new Set(requiredModels);
    const missing = r.skipped.filter((x) => x.kind === 'model' && need.has(x.name));
    if (missing.length) throw new SyncError(`sync failed for a model this task's workflow requires: ${missing.map((x) => x.error).join('; ')}`);
    return r;
  }

  /** Stops downloads in progress (shutdown). */
  close(): void {
    this.abort.abort(new SyncError('the agent is shutting down'));
  }

  private async runOnce(): Promise<SyncReport> {
    const log = this.o.logger;
    const started = Date.now();
    const report: SyncReport = { downloaded: [], present: 0, skipped: [] };
    let fatal: string | null = null;
    try {
      let manifest: SyncManifest__Output;
      try {
        manifest = await this.o.fetchManifest();
      } catch (e) {
        throw new SyncError(`could not fetch the sync manifest: ${(e as { details?: string }).details || (e as Error).message}`);
      }
      const models = manifest.models ?? [];
      const nodes = manifest.custom_nodes ?? [];
      if (models.length > 0) {
        if (!this.o.modelsDir) {
          for (const m of models) report.skipped.push({ kind: 'model', name: m.model_path, error: `model ${m.model_path}: this agent has no --models-dir to place it in` });
        } else await this.syncModels(this.o.modelsDir, models, report);
      }
      if (nodes.length > 0) {
        if (!this.o.customNodesDir) {
          for (const n of nodes) report.skipped.push({ kind: 'custom_node', name: n.package_name, error: `custom node ${n.package_name}@${n.node_version}: this agent has no --custom-nodes-dir (or --models-dir) to install it in` });
        } else await this.syncNodes(this.o.customNodesDir, nodes, report);
      }
    } catch (e) {
      fatal = (e as Error).message;
    }
    try {
      await this.o.afterSync();
    } catch (e) {
      log.warn({ err: e }, 'inventory report after sync failed');
    }
    this.syncs++;
    if (fatal !== null) {
      log.warn({ error: fatal, downloaded: report.downloaded }, 'sync failed');
      throw new SyncError(`sync failed: ${fatal}`);
    }
    const skipSig = JSON.stringify(report.skipped);
    if (report.skipped.length && skipSig !== this.lastSkipped) log.warn({ skipped: report.skipped.map((x) => x.error) }, 'sync: entries skipped (tasks that do not require them are not affected)');
    else if (report.skipped.length) log.debug({ skipped: report.skipped.length }, 'sync: entries still skipped');
    this.lastSkipped = skipSig;
    if (report.downloaded.length) log.info({ downloaded: report.downloaded, present: report.present, skipped: report.skipped.length, ms: Date.now() - started }, 'sync done');
    else log.debug({ present: report.present, skipped: report.skipped.length }, 'sync: nothing to download');
    return report;
  }

  private async syncModels(root: string, models: SyncModel__Output[], report: SyncReport): Promise<void> {
    await mkdir(root, { recursive: true });
    const state = await readState<ModelState>(root);
    let dirty = false;
    const tmpDir = path.join(root, SYNC_TMP_DIR);
    try {
      for (const m of models) {
        if (this.abort.signal.aborted) throw this.abort.signal.reason;
        try {
          const problem = modelPathProblem(m.model_path);
          if (problem !== null) throw new SyncError(`model_path ${JSON.stringify(m.model_path)} refused: ${problem}`);
          const dest = resolveInside(root, m.model_path, 'model_path');
          const sha = String(m.sha256).toLowerCase();
          if (!SHA256_RE.test(sha)) throw new SyncError(`model ${m.model_path}: the manifest has no valid SHA-256`);
          const size = Number(m.size);
          const have = await stat(dest).catch(() => null);
          if (have?.isFile() && have.size === size) {
            const known = state.entries[m.model_path];
            let hex = known && known.size === have.size && known.mtimeMs === have.mtimeMs ? known.sha256 : null;
            if (hex === null) {
              hex = await sha256File(dest, this.abort.signal);
              state.entries[m.model_path] = { size: have.size, mtimeMs: have.mtimeMs, sha256: hex };
              dirty = true;
            }
            if (hex === sha) {
              report.present++;
              continue;
            }
            this.o.logger.info({ model_path: m.model_path }, 'sync: local model differs from the registry (SHA-256); downloading');
          } else if (have && !have.isFile()) throw new SyncError(`model ${m.model_path}: ${dest} exists and is not a file`);
          await mkdir(tmpDir, { recursive: true });
          const tmp = path.join(tmpDir, `${randomBytes(8).toString('hex')}.part`);
          this.o.logger.info({ model_path: m.model_path, size }, 'sync: downloading model');
          try {
            await downloadVerified(m.download_url, tmp, size, sha, { signal: this.abort.signal, idleTimeoutMs: this.o.idleTimeoutMs ?? 120_000 });
          } catch (e) {
            throw new SyncError(`model ${m.model_path}: ${(e as Error).message}`);
          }
          await mkdir(path.dirname(dest), { recursive: true });
          await rename(tmp, dest);
          const st = await stat(dest);
          state.entries[m.model_path] = { size: st.size, mtimeMs: st.mtimeMs, sha256: sha };
          dirty = true;
          report.downloaded.push(m.model_path);
        } catch (e) {
          if (this.abort.signal.aborted) throw e;
          report.skipped.push({ kind: 'model', name: m.model_path, error: e instanceof SyncError ? e.message : `model ${m.model_path}: ${(e as Error).message}` });
        }
      }
    } finally {
      if (dirty) await writeState(root, state).catch((e: unknown) => this.o.logger.warn({ err: e }, 'could not write the sync state file'));
      await rm(tmpDir, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  private async syncNodes(root: string, nodes: SyncCustomNode__Output[], report: SyncReport): Promise<void> {
    await mkdir(root, { recursive: true });
    const state = await readState<NodeState>(root);
    let dirty = false;
    const tmpDir = path.join(root, SYNC_TMP_DIR);
    try {
      for (const n of nodes) {
        if (this.abort.signal.aborted) throw this.abort.signal.reason;
        const label = `custom node ${n.package_name}@${n.node_version}`;
        try {
          if (!PACKAGE_NAME_RE.test(n.package_name)) throw new SyncError(`${label}: package_name refused (must be a single directory name)`);
          if (!NODE_VERSION_RE.test(n.node_version)) throw new SyncError(`${label}: node_version refused`);
          const dest = resolveInside(root, n.package_name, 'package_name');
          const sha = String(n.sha256).toLowerCase();
          if (!SHA256_RE.test(sha)) throw new SyncError(`${label}: the manifest has no valid SHA-256`);
          const known = state.entries[n.package_name];
          const have = await stat(dest).catch(() => null);
          if (have && known && known.node_version === n.node_version && known.sha256 === sha) {
            report.present++;
            continue;
          }
          const work = path.join(tmpDir, randomBytes(8).toString('hex'));
          await mkdir(path.join(work, 'x'), { recursive: true });
          const archive = path.join(work, 'package');
          this.o.logger.info({ package_name: n.package_name, node_version: n.node_version, size: Number(n.size) }, 'sync: downloading custom node package');
          try {
            await downloadVerified(n.download_url, archive, Number(n.size), sha, { signal: this.abort.signal, idleTimeoutMs: this.o.idleTimeoutMs ?? 120_000 });
          } catch (e) {
            throw new SyncError(`${label}: ${(e as Error).message}`);
          }
          let src: string;
          try {
            src = await unpack(archive, path.join(work, 'x'), n.package_name);
          } catch (e) {
            throw new SyncError(`${label}: ${(e as Error).message}`);
          }
          // replace what was there (an older version, or an unmanaged directory of the same name)
          if (have) await rename(dest, path.join(work, 'old'));
          await rename(src, dest);
          state.entries[n.package_name] = { node_version: n.node_version, sha256: sha };
          dirty = true;
          report.downloaded.push(n.inventory_name || `${n.package_name}@${n.node_version}`);
        } catch (e) {
          if (this.abort.signal.aborted) throw e;
          report.skipped.push({ kind: 'custom_node', name: n.package_name, error: e instanceof SyncError ? e.message : `${label}: ${(e as Error).message}` });
        }
      }
    } finally {
      if (dirty) await writeState(root, state).catch((e: unknown) => this.o.logger.warn({ err: e }, 'could not write the sync state file'));
      // ComfyUI would try to import a leftover directory: never leave one behind
      await rm(tmpDir, { recursive: true, force: true }).catch(() => undefined);
    }
  }
}

/**
 * The custom nodes inventory: entries of the custom nodes dir (scanCustomNodes), those installed
 * by sync as `<package_name>@<node_version>`, the others by name.
 */
export async function customNodeInventory(dir: string | undefined): Promise<string[]> {
  const names = (await scanCustomNodes(dir)).filter((n) => n !== SYNC_TMP_DIR);
  if (!dir || names.length === 0) return names;
  const state = await readState<NodeState>(dir);
  return names.map((n) => {
    const s = state.entries[n];
    return s ? `${n}@${s.node_version}` : n;
  });
}
