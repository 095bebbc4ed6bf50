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
import { PgProxy } from '../helpers/pg-proxy.js';
import { normaliseDbError, isConnectionError, databaseUnavailable } from '../../src/persistence/db.js';
import { AppError, DbError, statementShape } from '../../src/shared/errors.js';

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

/** An error shaped like the pg driver's (knex writes the query, values filled in, before its message). */
const pgError = (code: string, message: string, extra: Record<string, unknown> = {}): Error =>
  Object.assign(new Error(`select * from users where email = 'SECRET-VALUE' - ${message}`), { code, severity: 'ERROR', routine: 'r', ...extra });

test('the database layer classifies errors in one place: connection-level ones are 503 database_unavailable, others a DbError without values', () => {
  const outage = [
    Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED', errno: -111, syscall: 'connect' }),
    Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
    pgError('57P01', 'terminating connection due to administrator command', { severity: 'FATAL' }),
    pgError('57P03', 'the database system is starting up', { severity: 'FATAL' }),
    pgError('08006', 'connection failure'),
    new Error('Connection terminated unexpectedly'),
    Object.assign(new Error('Knex: Timeout acquiring a connection. The pool is probably full.'), { name: 'KnexTimeoutError' }),
    new Error('wrapped', { cause: Object.assign(new Error('connect ECONNREFUSED ::1:5432'), { code: 'ECONNREFUSED' }) }),
  ];
  for (const e of outage) {
    assert.ok(isConnectionError(e), e.message);
    const n = normaliseDbError(e, 'select 1');
    assert.ok(n instanceof AppError, e.message);
    assert.equal(n.kind, 'unavailable');
    assert.equal(n.code, 'database_unavailable');
    assert.ok((n.retryAfterS ?? 0) >= 1);
  }
  // client-made or statement errors are not an outage: 08P01 (a NUL byte), 22P02, 23505, 40001
  for (const [code, msg] of [
    ['08P01', 'invalid message format'],
    ['22P02', 'invalid input syntax for type uuid: "SECRET-VALUE"'],
    ['23505', 'duplicate key value violates unique constraint "users_email_uq"'],
    ['40001', 'could not serialize access'],
  ] as const) {
    const e = pgError(code, msg, { constraint: code === '23505' ? 'users_email_uq' : undefined, detail: 'Key (email)=(SECRET-VALUE) already exists.' });
    assert.equal(isConnectionError(e), false, code);
    const n = normaliseDbError(e, "select * from users where email = ? and note = 'SECRET-LITERAL'");
    assert.ok(n instanceof DbError, code);
    assert.equal(n.code, code);
    const all = JSON.stringify({ ...n, message: n.message, stack: n.stack });
    assert.doesNotMatch(all, /SECRET-VALUE|SECRET-LITERAL/);
    assert.equal(n.statement, "select * from users where email = ? and note = '?'");
    if (code === '23505') {
      assert.equal(n.constraint, 'users_email_uq');
      assert.match(n.message, /users_email_uq/);
    }
  }
  // the caller's own errors pass through untouched
  const mine = new AppError('conflict', 'slug_taken', 'taken');
  assert.equal(normaliseDbError(mine), mine);
  const bug = new TypeError('x is undefined');
  assert.equal(normaliseDbError(bug), bug);
  assert.equal(statementShape(`do $$ begin raise 'SECRET'; end $$`), 'do $$?$$');
});

test('a background loop failing on the outage logs at debug, not once per tick at warn (the outage line is the database layer\'s)', () => {
  const capture = (level: string): { log: ReturnType<typeof createLogger>; out: () => LogLine[] } => {
    const buf: string[] = [];
    const log = createLogger(
      level,
      new Writable({
        write(chunk: Buffer, _enc, cb) {
          buf.push(String(chunk));
          cb();
        },
      }),
    );
    return { log, out: () => buf.join('').split('\n').filter(Boolean).map((l) => JSON.parse(l) as LogLine) };
  };
  const info = capture('info');
  info.log.warn({ err: databaseUnavailable() }, 'outbox scan failed');
  info.log.error({ err: new Error('sweep failed', { cause: databaseUnavailable() }) }, 'files sweep failed');
  info.log.warn({ err: new Error('disk full') }, 'could not write the sync state file');
  assert.deepEqual(
    info.out().map((l) => [l.level, l.msg]),
    [['warn', 'could not write the sync state file']],
  );
  const debug = capture('debug');
  debug.log.warn({ err: databaseUnavailable() }, 'outbox scan failed');
  assert.deepEqual(
    debug.out().map((l) => [l.level, l.msg, (l.err as { code?: string } | undefined)?.code]),
    [['debug', 'outbox scan failed', 'database_unavailable']],
  );
});
