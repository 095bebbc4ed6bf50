// A node as a child process (`bin/gantry.mjs serve`), for tests that SIGKILL it: the environment is
// the test's own minus every GANTRY_* and REDIS_URL setting, plus the given ones; resolves once the
// node logs "listening". childNodeSetup makes its database, data dir, ports and environment.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { createTestDatabase, type TestDatabase } from './pg.js';

const root = new URL('../..', import.meta.url).pathname;

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
    s.on('error', reject);
  });

/** Runs one `gantry` command (bin/gantry.mjs) to its end with exactly this environment: its exit code and output. */
export function runGantryCli(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const p = spawn(process.execPath, [join(root, 'bin/gantry.mjs'), ...args], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  p.stdout.on('data', (d: Buffer) => (stdout += String(d)));
  p.stderr.on('data', (d: Buffer) => (stderr += String(d)));
  return new Promise((resolve) => p.on('close', (code) => resolve({ code, stdout, stderr })));
}

export function serveChild(env: Record<string, string>): Promise<{ child: ChildProcess; exit: Promise<unknown> }> {
  const clean: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_') && k !== 'REDIS_URL') clean[k] = v;
  const child = spawn(process.execPath, ['bin/gantry.mjs', 'serve'], { cwd: root, env: { ...clean, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr?.on('data', (d) => (err += d));
  const exit = new Promise((r) => child.on('exit', r));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`node did not start: ${err}`)), 30_000);
    createInterface({ input: child.stdout! }).on('line', (l) => {
      if (l.includes('"msg":"listening"')) {
        clearTimeout(timer);
        resolve({ child, exit });
      }
    });
  });
}

/** What a test needs to run (and restart) a child node: its database, data dir, ports and environment. */
export interface ChildNodeSetup {
  db: TestDatabase;
  dataDir: string;
  httpPort: number;
  grpcPort: number;
  /** For serveChild: the database, the data dir, HTTP and gRPC on loopback at free ports, then `extra`. */
  env: Record<string, string>;
}

/**
 * A fresh database (`label`), a data dir (gantry-<dirPrefix>-*) and two free ports, and the child
 * node's environment over them plus `extra` (the test's own GANTRY_* settings). The test drops the
 * database and removes the data dir when done.
 */
export async function childNodeSetup(label: string, dirPrefix: string, extra: Record<string, string> = {}): Promise<ChildNodeSetup> {
  const db = await createTestDatabase(label);
  const dataDir = mkdtempSync(join(tmpdir(), `gantry-${dirPrefix}-`));
  const [httpPort, grpcPort] = [await freePort(), await freePort()];
  const env = {
    DATABASE_URL: db.url,
    GANTRY_DATA_DIR: dataDir,
    GANTRY_HTTP_HOST: '127.0.0.1',
    GANTRY_HTTP_PORT: String(httpPort),
    GANTRY_GRPC_HOST: '127.0.0.1',
    GANTRY_GRPC_PORT: String(grpcPort),
    ...extra,
  };
  return { db, dataDir, httpPort, grpcPort, env };
}
