/**
 * A real PostgreSQL outage, caused safely: the node reaches this file's own database through a TCP
 * proxy on loopback (node:net) that the test cuts (listener closed, every live connection
 * destroyed) and restores. The machine's shared PostgreSQL is never stopped.
 *
 * During the outage every request that needs the database answers 503 `database_unavailable`
 * with Retry-After (not 500 `internal_error`), the node logs the outage once (not once per
 * request), and after the restore requests succeed again.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/shared/config.js';
import { createLogger } from '../../src/shared/logger.js';
import { startNode } from '../../src/main.js';
import { HttpClient } from '../helpers/node.js';
import { adminUrl, createTestDatabase } from '../helpers/pg.js';
import { registerUser } from '../helpers/identity.js';

/** A cuttable TCP proxy to the shared PostgreSQL. */
class PgProxy {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(
    private readonly host: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.targetPort, this.host);
      this.sockets.add(client).add(upstream);
      const drop = (): void => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    const a = server.address();
    if (a && typeof a === 'object') this.port = a.port;
    this.server = server;
  }

  /** The outage: nothing listens on the port any more and every open connection is reset. */
  async cut(): Promise<void> {
    const s = this.server;
    this.server = null;
    for (const x of this.sockets) x.destroy();
    this.sockets.clear();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  async stop(): Promise<void> {
    await this.cut();
  }
}

interface LogLine {
  level: string;
  msg: string;
  request_id?: string;
  [k: string]: unknown;
}

test('a PostgreSQL outage answers 503 database_unavailable with Retry-After, is logged once, and the node recovers', async () => {
  const db = await createTestDatabase('outage');
  const admin = new URL(adminUrl());
  const proxy = new PgProxy(admin.hostname, Number(admin.port || 5432));
  await proxy.start();
  const url = new URL(db.url);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-outage-'));
  const lines: LogLine[] = [];
  let outageLogged: (() => void) | null = null;
  const dest = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of String(chunk).split('\n')) {
        if (!l) continue;
        const line = JSON.parse(l) as LogLine;
        lines.push(line);
        if (line.msg.startsWith('database unavailable')) outageLogged?.();
      }
      cb();
    },
  });
  const config = loadConfig(
    {},
    {
      DATABASE_URL: url.toString(),
      GANTRY_DATA_DIR: dataDir,
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_HTTP_PORT: 0,
      GANTRY_GRPC_HOST: '127.0.0.1',
      GANTRY_GRPC_PORT: 0,
      GANTRY_DB_POOL_MAX: 5,
    },
  );
  const node = await startNode(config, { logger: createLogger('info', dest) });
  const http = new HttpClient(node.baseUrl);
  try {
    const user = await registerUser(http);
    const ok = await http.get('/workflows', { token: user.accessToken, team: user.teamId });
    assert.equal(ok.status, 200, ok.text);

    const logged = new Promise<void>((resolve) => (outageLogged = resolve));
    await proxy.cut();

    // requests that need the database: an unauthenticated login and authenticated reads
    const during = [
      await http.post('/auth/login', { email_address: user.email, password: user.password }),
      await http.post('/auth/login', { email_address: 'nobody@example.test', password: 'whatever-password' }),
      await http.get('/workflows', { token: user.accessToken, team: user.teamId }),
      await http.get('/workflows', { token: user.accessToken, team: user.teamId }),
      await http.get('/users/me', { token: user.accessToken }),
      await http.get(`http://127.0.0.1:${node.httpPort}/readyz`),
    ];
    for (const r of during.slice(0, -1)) {
      assert.equal(r.status, 503, `${r.status} ${r.text}`);
      assert.equal(r.body.error_code, 'database_unavailable', r.text);
      assert.equal(typeof r.body.error_message, 'string');
      const ra = Number(r.headers.get('retry-after'));
      assert.ok(Number.isInteger(ra) && ra >= 1, `Retry-After: ${r.headers.get('retry-after')}`);
    }
    assert.equal(during.at(-1)?.status, 503);
    await logged;

    const outageLines = lines.filter((l) => l.msg.startsWith('database unavailable'));
    assert.equal(outageLines.length, 1, `one outage line, got ${outageLines.length}`);
    assert.equal(outageLines[0]?.level, 'error');
    // no request logged an error of its own (no "unexpected error" per request)
    const perRequest = lines.filter((l) => l.level === 'error' && l.request_id !== undefined);
    assert.deepEqual(perRequest, []);

    await proxy.start();
    const after = await http.post('/auth/login', { email_address: user.email, password: user.password });
    assert.equal(after.status, 200, after.text);
    const list = await http.get('/workflows', { token: user.accessToken, team: user.teamId });
    assert.equal(list.status, 200, list.text);
    assert.equal(lines.filter((l) => l.msg === 'database reachable again').length, 1);
    assert.equal(lines.filter((l) => l.msg.startsWith('database unavailable')).length, 1);
  } finally {
    await node.close();
    await proxy.stop();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
