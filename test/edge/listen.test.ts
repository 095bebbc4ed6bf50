// Exclusive listen (issue 12, fault 8): a second node on a port another node listens on must fail
// at start with one clear line, not share the port (uWS's default listen let the kernel split
// connections between the two nodes). The gRPC port likewise.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

/** This test's environment for a single node (REDIS_URL would make it a cluster member). */
const singleNode = (): NodeJS.ProcessEnv => {
  const { REDIS_URL: _r, ...rest } = process.env;
  return rest;
};
import { createServer, type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, ConfigError, type RawConfig } from '../../src/shared/config.js';
import { createLogger } from '../../src/shared/logger.js';
import { startNode } from '../../src/main.js';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createTestDatabase } from '../helpers/pg.js';

let first: TestNode;

/** A port nobody listens on now. The first node must bind a fixed port: Linux never shares a port
 * that was picked through port 0, so an ephemeral first node would hide a shared listen. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

before(async () => {
  first = await startTestNode({ GANTRY_HTTP_PORT: await freePort(), GANTRY_GRPC_PORT: await freePort() }, 'listen');
});
after(async () => {
  await first.stop();
});

/** Starts a second node in-process with its own database and data dir; everything is removed after. */
async function startSecond(overrides: Partial<RawConfig>): Promise<unknown> {
  const db = await createTestDatabase('listen2');
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-listen-'));
  try {
    const config = loadConfig({}, { DATABASE_URL: db.url, GANTRY_DATA_DIR: dataDir, GANTRY_HTTP_HOST: '127.0.0.1', GANTRY_HTTP_PORT: 0, GANTRY_GRPC_HOST: '127.0.0.1', GANTRY_GRPC_PORT: 0, GANTRY_DB_POOL_MAX: 3, ...overrides });
    const node = await startNode(config, { logger: createLogger('silent') });
    await node.close();
    return null;
  } catch (e) {
    return e;
  } finally {
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

test('a second node on the same HTTP port fails at start with a clear error; the first keeps serving', async () => {
  const port = first.node.httpPort;
  const err = await startSecond({ GANTRY_HTTP_PORT: port });
  assert.ok(err instanceof ConfigError, `the second start must fail with a ConfigError, got ${String(err)}`);
  // refused by the start-up port check, before the database is touched (the exclusive listen closes the window after it)
  assert.equal(err.message, `GANTRY_HTTP_PORT=${port}: 127.0.0.1:${port} already in use (is another node running?)`);
  const codes = await Promise.all(Array.from({ length: 10 }, async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).status));
  assert.deepEqual(codes, Array(10).fill(200));
});

test('a second node on the same gRPC port fails at start with a clear error', async () => {
  const port = first.node.grpcPort;
  const err = await startSecond({ GANTRY_GRPC_PORT: port });
  assert.ok(err instanceof ConfigError, `the second start must fail with a ConfigError, got ${String(err)}`);
  assert.equal(err.message, `GANTRY_GRPC_PORT=${port}: 127.0.0.1:${port} already in use (is another node running?)`);
});

test('`gantry serve` on a busy HTTP port: one line on stderr and exit 78', async () => {
  const db = await createTestDatabase('listen-cli');
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-listen-cli-'));
  try {
    const port = first.node.httpPort;
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'serve'], {
      cwd: new URL('../..', import.meta.url).pathname,
      env: { ...singleNode(), DATABASE_URL: db.url, GANTRY_DATA_DIR: dataDir, GANTRY_HTTP_HOST: '127.0.0.1', GANTRY_HTTP_PORT: String(port), GANTRY_GRPC_HOST: '127.0.0.1', GANTRY_GRPC_PORT: '0', LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const bound = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(bound);
    assert.equal(code, 78, `exit code (stderr: ${stderr})`);
    assert.equal(stderr, `gantry: GANTRY_HTTP_PORT=${port}: 127.0.0.1:${port} already in use (is another node running?)\n`);
  } finally {
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
