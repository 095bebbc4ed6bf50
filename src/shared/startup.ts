import { closeSync, linkSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { createServer } from 'node:net';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from './config.js';

/**
 * Start-up checks run before a node touches anything (database, migrations, keys): a refusal is a
 * ConfigError (one line on stderr, exit 78).
 */

/**
 * Refuses when host:port cannot be bound (another process listens there). Port 0 (pick a free one)
 * is never busy. The probe socket is closed before returning, so the real server binds it next.
 */
export async function assertPortFree(name: string, host: string, port: number): Promise<void> {
  if (port === 0) return;
  await new Promise<void>((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', (e: NodeJS.ErrnoException) => {
      const why = e.code === 'EADDRINUSE' ? 'already in use (is another node running?)' : `cannot be bound (${e.code ?? e.message})`;
      reject(new ConfigError(`${name}=${port}: ${host}:${port} ${why}`));
    });
    srv.listen({ host, port, exclusive: true }, () => srv.close(() => resolve()));
  });
}

const held = new Set<string>();

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: the process exists but belongs to another user
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function holderPid(raw: string): number | null {
  const pid = Number.parseInt(raw.split('\n')[0] ?? '', 10);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/** A lock file holder is live when its pid runs (and, for this very process, when it still holds the lock). */
function isLive(path: string, pid: number | null): boolean {
  if (pid === null) return false;
  if (pid === process.pid) return held.has(path);
  return pidAlive(pid);
}

function readOrNull(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

export interface DataDirLock {
  readonly path: string;
  release(): void;
}

/**
 * An exclusive lock on a data directory (embedded database and local object store): the file
 * `<dir>/gantry.lock`, created with O_EXCL, holding the owner's pid. A lock whose pid no longer
 * runs is stale and taken over (moved aside first, and put back if it turned out to be a fresh one).
 * A second node on the same directory is refused with a ConfigError naming the holder's pid.
 */
export function lockDataDir(dir: string): DataDirLock {
  const path = join(dir, 'gantry.lock');
  const refuse = (pid: number | null): ConfigError =>
    new ConfigError(`GANTRY_DATA_DIR=${JSON.stringify(dir)} is in use by another gantry process (pid ${pid ?? 'unknown'}, lock ${path}); stop it or use another data directory`);
  for (let attempt = 0; attempt < 5; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o644);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const raw = readOrNull(path);
      if (raw === null) continue; // released meanwhile
      const pid = holderPid(raw);
      if (isLive(path, pid)) throw refuse(pid);
      // stale: move it aside atomically, then make sure what was moved is the stale file we judged
      const aside = `${path}.stale-${process.pid}`;
      try {
        renameSync(path, aside);
      } catch (re) {
        if ((re as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw re;
      }
      const moved = readOrNull(aside) ?? '';
      if (moved !== raw && isLive(path, holderPid(moved))) {
        // another starter took the stale lock over between our read and rename: give it back
        try {
          linkSync(aside, path);
        } finally {
          unlinkSync(aside);
        }
        throw refuse(holderPid(moved));
      }
      unlinkSync(aside);
      continue;
    }
    try {
      writeSync(fd, `${process.pid}\n${hostname()}\n${new Date().toISOString()}\n`);
    } finally {
      closeSync(fd);
    }
    held.add(path);
    let released = false;
    return {
      path,
      release() {
        if (released) return;
        released = true;
        held.delete(path);
        // only remove the file when it is still ours
        const raw = readOrNull(path);
        if (raw !== null && holderPid(raw) === process.pid) unlinkSync(path);
      },
    };
  }
  throw refuse(holderPid(readOrNull(path) ?? ''));
}
