/**
 * No secret reaches the logs when SQL fails, and a 500 is logged with its request id.
 *
 * The test's own database gets triggers that make the statements carrying secrets fail: the
 * insert of a user (scrypt password_hash), the password reset's update (password_hash), the
 * insert of a webhook (signing_secret) and of a credential (secret_hash). The trigger's error puts
 * the whole new row into its message, DETAIL and HINT, the way a driver error can echo values
 * (`Key (email)=(...) already exists`). The values the node really bound to those statements are
 * recorded from the driver (knex's `query` event) and the captured log must contain none of them,
 * nor the plaintext passwords; every forced failure must still be logged (with its request id and
 * SQLSTATE), so the test cannot pass by logging nothing.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import pg from 'pg';
import { createLogger } from '../../src/shared/logger.js';
import type { GantryNode } from '../../src/main.js';
import { startTestNode, type HttpClient, type TestNode } from '../helpers/node.js';
import type { TestDatabase } from '../helpers/pg.js';
import { registerUser, emailToken, type TestUser } from '../helpers/identity.js';

interface LogLine {
  level: string;
  msg: string;
  request_id?: string;
  err?: { type?: string; message?: string; code?: string; stack?: string; [k: string]: unknown };
  [k: string]: unknown;
}

let db: TestDatabase;
let node: GantryNode;
let http: HttpClient;
let t: TestNode;
const raw: string[] = [];
const lines = (): LogLine[] =>
  raw
    .join('')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LogLine);

/** Statements the node sent, with the values it bound (recorded from the driver). */
const sent: Array<{ sql: string; bindings: unknown[] }> = [];

before(async () => {
  const dest = new Writable({
    write(chunk: Buffer, _enc, cb) {
      raw.push(String(chunk));
      cb();
    },
  });
  t = await startTestNode({}, 'logsecrets', { logger: createLogger('debug', dest) });
  ({ node, http, db } = t);
  (node.db.orm.em.getConnection() as unknown as { getKnex(): { on(ev: 'query', f: (d: { sql: string; bindings?: unknown[] }) => void): void } })
    .getKnex()
    .on('query', (d: { sql: string; bindings?: unknown[] }) => sent.push({ sql: d.sql, bindings: d.bindings ?? [] }));
});

after(async () => {
  await t?.stop();
});

/** The SQL literals of a comma-separated list (`'a', 'b''c'::jsonb, null, 3`), unquoted; null for a non-string. */
function literals(list: string): Array<string | null> {
  const out: Array<string | null> = [];
  let i = 0;
  while (i < list.length) {
    while (list[i] === ' ' || list[i] === ',') i++;
    if (i >= list.length || list[i] === ')') break;
    if (list[i] === "'") {
      let v = '';
      i++;
      while (i < list.length) {
        if (list[i] === "'" && list[i + 1] === "'") {
          v += "'";
          i += 2;
        } else if (list[i] === "'") {
          i++;
          break;
        } else v += list[i++];
      }
      out.push(v);
    } else out.push(null);
    let depth = 0;
    while (i < list.length && !(depth === 0 && (list[i] === ',' || list[i] === ')'))) {
      if (list[i] === '(') depth++;
      if (list[i] === ')') depth--;
      i++;
    }
    if (list[i] === ')') break;
  }
  return out;
}

/**
 * The values the node sent for `column` of `table`. The driver (MikroORM's execute) inlines every
 * parameter into the statement text, so they are read back from it:
 * `insert into t (a, b) values ('x', 'y')` or `update t set b = 'y'`.
 */
function boundValues(table: string, column: string): string[] {
  const out: string[] = [];
  for (const s of sent) {
    const sql = s.sql.replace(/\s+/g, ' ');
    const ins = new RegExp(`^insert into ${table} \\(([^)]*)\\) values \\((.*)$`, 'i').exec(sql);
    let v: string | null | undefined;
    if (ins?.[1] && ins[2] !== undefined) v = literals(ins[2])[ins[1].split(',').map((c) => c.trim()).indexOf(column)];
    else {
      const upd = new RegExp(`^update ${table} set (?:.*?, )?${column} = (.*)$`, 'i').exec(sql);
      if (upd?.[1] !== undefined) v = literals(upd[1])[0];
    }
    if (typeof v === 'string') out.push(v);
  }
  return out;
}

test('forced SQL failures on statements carrying secrets log the failure but no secret', async () => {
  const owner: TestUser = await registerUser(http);
  const resetEmail = owner.email;
  const forgot = await http.post('/auth/password/forgot', { email_address: resetEmail });
  assert.equal(forgot.status, 200, forgot.text);
  const resetToken = await emailToken(node, resetEmail, 'password_reset');

  // every statement that writes one of these secrets fails from now on, its error echoing the row
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    await c.query(`create function test_echo_and_fail() returns trigger language plpgsql as $$
      begin
        raise exception using errcode = 'P0001', message = 'forced failure: ' || to_jsonb(new)::text, detail = to_jsonb(new)::text, hint = to_jsonb(new)::text;
      end $$`);
    await c.query(`create trigger test_fail_users_insert before insert on users for each row execute function test_echo_and_fail()`);
    await c.query(`create trigger test_fail_users_password before update of password_hash on users for each row execute function test_echo_and_fail()`);
    await c.query(`create trigger test_fail_webhooks before insert on webhooks for each row execute function test_echo_and_fail()`);
    await c.query(`create trigger test_fail_credentials before insert on credentials for each row execute function test_echo_and_fail()`);
  } finally {
    await c.end();
  }

  const newPassword = `reset-pw-${Date.now().toString(36)}-Zq9`;
  const registerPassword = `register-pw-${Date.now().toString(36)}-Xk7`;
  const auth = { token: owner.accessToken, team: owner.teamId };
  const failed = [
    await http.post('/auth/register', { email_address: `victim-${Date.now()}@example.test`, password: registerPassword, first_name: 'V', last_name: 'Ictim' }),
    await http.post('/auth/password/reset', { reset_token: resetToken, new_password: newPassword }),
    await http.post('/webhooks', { display_name: 'hook', webhook_url: 'https://127.0.0.1:9/hook', webhook_events: ['task.completed'] }, auth),
    await http.post('/credentials', { credential_type: 'integration', display_name: 'ci' }, auth),
  ];
  for (const r of failed) {
    assert.equal(r.status, 500, r.text);
    assert.equal(r.body.error_code, 'internal_error');
  }

  // the secrets the node really bound to the failing statements
  const secrets: Array<[string, string]> = [
    ...boundValues('users', 'password_hash').map((v): [string, string] => ['password_hash', v]),
    ...boundValues('webhooks', 'signing_secret').map((v): [string, string] => ['signing_secret', v]),
    ...boundValues('credentials', 'secret_hash').map((v): [string, string] => ['secret_hash', v]),
  ];
  for (const kind of ['password_hash', 'signing_secret', 'secret_hash'])
    assert.ok(
      secrets.some(([k]) => k === kind),
      `recorded a bound ${kind}`,
    );
  // two password hashes: the registration's and the reset's (the owner's own registration too)
  assert.ok(secrets.filter(([k]) => k === 'password_hash').length >= 2);
  secrets.push(['password', registerPassword], ['password', newPassword], ['password', owner.password]);
  // (the reset link itself is logged on purpose when no SMTP_URL is configured: not checked here)

  const text = raw.join('');
  for (const [kind, v] of secrets) {
    assert.ok(v.length >= 12, `${kind} is long enough to grep`);
    assert.ok(!text.includes(v), `a ${kind} appears in the log`);
    // and not JSON-escaped either (a hash with $ or / inside a JSON string)
    assert.ok(!text.includes(JSON.stringify(v).slice(1, -1)), `a ${kind} appears (escaped) in the log`);
  }
  // nor the trigger's echo of the row, nor a statement with its values filled in
  assert.doesNotMatch(text, /forced failure/);
  assert.doesNotMatch(text, /"(detail|hint|where|query|sql|parameters|bindings)":/);

  // each failure was logged, at error, with its request id, the SQLSTATE and the statement's shape
  const errs = lines().filter((l) => l.level === 'error' && l.err);
  for (const r of failed) {
    const rid = r.headers.get('x-request-id');
    assert.ok(rid);
    const mine = errs.filter((l) => l.request_id === rid);
    assert.ok(mine.length >= 1, `an error line for request ${rid}`);
    for (const l of mine) {
      assert.equal(l.err?.code, 'P0001');
      assert.equal(l.err?.type, 'DbError');
      assert.match(String(l.err?.statement ?? ''), /^(insert into|update) (users|webhooks|credentials)/);
    }
  }
});

test('pino redacts secret-bearing fields wherever they sit in a log object', () => {
  const buf: string[] = [];
  const log = createLogger(
    'info',
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        buf.push(String(chunk));
        cb();
      },
    }),
  );
  const err = Object.assign(new Error('boom'), {
    signing_secret: 'SIGNING-SECRET-1',
    detail: 'Key (email)=(DETAIL-VALUE-1) already exists',
    query: 'QUERY-TEXT-1',
    response: { headers: { Authorization: 'Bearer AUTH-2' } },
  });
  const body = { password_hash: 'HASH-1', credential: { secret_hash: 'SECRET-HASH-1' }, access_token: 'ACCESS-1', refresh_token: 'REFRESH-1', list: [{ deep: { client_secret: 'CLIENT-1' } }] };
  log.error(
    {
      err,
      password: 'PASSWORD-1',
      body,
      headers: { authorization: 'Bearer AUTH-1', cookie: 'COOKIE-1' },
      api_key: 'APIKEY-1',
      token: 'TOKEN-1',
      webhook: { signing_secret: 'SIGNING-SECRET-2', display_name: 'kept-name' },
    },
    'x',
  );
  // a raw driver error (pg's shape: SQLSTATE + severity, the query with values in its message) as a cause
  const driver = Object.assign(new Error("insert into webhooks values ('SIGNING-SECRET-3') - forced"), { code: '23505', severity: 'ERROR', constraint: 'webhooks_pkey', detail: 'Key (id)=(X) exists' });
  log.error({ err: new Error('wrapper', { cause: driver }) }, 'y');
  const out = buf.join('');
  for (const v of [
    'SIGNING-SECRET-1',
    'SIGNING-SECRET-2',
    'SIGNING-SECRET-3',
    'DETAIL-VALUE-1',
    'QUERY-TEXT-1',
    'PASSWORD-1',
    'HASH-1',
    'SECRET-HASH-1',
    'ACCESS-1',
    'REFRESH-1',
    'AUTH-1',
    'AUTH-2',
    'COOKIE-1',
    'APIKEY-1',
    'TOKEN-1',
    'CLIENT-1',
  ])
    assert.ok(!out.includes(v), `${v} in ${out}`);
  assert.match(out, /\[redacted\]/);
  assert.match(out, /"message":"boom"/);
  assert.match(out, /kept-name/);
  assert.match(out, /wrapper: database error 23505 unique_violation \(constraint webhooks_pkey\)/);
  // the caller's objects are not changed
  assert.equal(body.password_hash, 'HASH-1');
  assert.equal(body.list[0]?.deep.client_secret, 'CLIENT-1');
});

test('a 500 is logged with the request id the response carries', async () => {
  const before = lines().length;
  const r = await http.get('/_debug/throw');
  assert.equal(r.status, 500);
  assert.equal(r.body.error_code, 'internal_error');
  const rid = r.headers.get('x-request-id');
  assert.ok(rid, 'X-Request-ID header');
  const fresh = lines().slice(before);
  const logged = fresh.filter((l) => l.level === 'error' && l.request_id === rid);
  assert.ok(logged.length >= 1, 'an error line with the request id');
  for (const l of logged) {
    assert.equal(l.err?.type, 'TypeError');
    assert.match(String(l.err?.message), /boom \(debug route\)/);
  }
  // the error lines of this 500 are all under its request id (none without one)
  assert.deepEqual(
    fresh.filter((l) => l.level === 'error' && l.request_id !== rid),
    [],
  );
  // and a request id the client sent is the one logged
  const mine = `client-rid-${Date.now()}`;
  const r2 = await http.get('/_debug/throw', { headers: { 'x-request-id': mine } });
  assert.equal(r2.status, 500);
  assert.equal(r2.headers.get('x-request-id'), mine);
  assert.ok(lines().some((l) => l.level === 'error' && l.request_id === mine && l.err?.type === 'TypeError'));
});
