import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode } from '../helpers/node.js';
import { emailToken } from '../helpers/identity.js';

const reg = (email: string) => ({ email_address: email, password: 'a good long password', first_name: 'Q', last_name: 'User' });

test('registration disabled: server-info says so and register is 403', async () => {
  const providers = [{ id: 'corp', display_name: 'Corp SSO', issuer: 'https://idp.example.test', client_id: 'gantry', client_secret: 'not-used-here' }];
  const t = await startTestNode({ GANTRY_REGISTRATION_ENABLED: false, GANTRY_OAUTH_PROVIDERS: JSON.stringify(providers) }, 'idnoreg');
  try {
    const info = await t.http.get('/server-info');
    assert.deepEqual(info.body, { registration_enabled: false, oauth_enabled: true, oauth_providers: [{ id: 'corp', display_name: 'Corp SSO' }], agent_grpc_port: t.node.grpcPort, agent_grpc_tls: false });
    const r = await t.http.post('/auth/register', reg('a@example.test'));
    assert.equal(r.status, 403);
    assert.equal(r.body.error_code, 'registration_disabled');
  } finally {
    await t.stop();
  }
});

test('quotas (max_users, max_owned_teams, max_teams), email verification required, and rate limits with Retry-After', async () => {
  const t = await startTestNode(
    { GANTRY_MAX_USERS: 2, GANTRY_MAX_TEAMS: 5, GANTRY_MAX_OWNED_TEAMS: 3, GANTRY_EMAIL_VERIFICATION_REQUIRED: true, GANTRY_AUTH_RATE_LIMIT_PER_MIN: 6 },
    'idquota',
  );
  try {
    assert.equal((await t.http.get('/server-info')).body.registration_enabled, true);
    assert.equal((await t.http.post('/auth/register', reg('a@example.test'))).status, 200);
    assert.equal((await t.http.post('/auth/register', reg('b@example.test'))).status, 200);
    const third = await t.http.post('/auth/register', reg('c@example.test'));
    assert.equal(third.status, 403);
    assert.equal(third.body.error_code, 'quota_exceeded');
    assert.match(third.body.error_message, /max_users/);

    // login needs a verified email here
    const unverified = await t.http.post('/auth/login', { email_address: 'a@example.test', password: 'a good long password' });
    assert.equal(unverified.status, 403);
    assert.equal(unverified.body.error_code, 'email_not_verified');
    const tokens: Record<string, string> = {};
    for (const who of ['a', 'b']) {
      const v = await t.http.post('/auth/email/verify', { verification_token: await emailToken(t.node, `${who}@example.test`, 'email_verification') });
      assert.equal(v.status, 200);
      const l = await t.http.post('/auth/login', { email_address: `${who}@example.test`, password: 'a good long password' });
      assert.equal(l.status, 200, l.text);
      tokens[who] = l.body.access_token;
    }
    const me = await t.http.get('/users/me', { token: tokens.a });
    assert.deepEqual(me.body.feature_flags.global.quotas, { max_users: 2, max_teams: 5, max_agents: 0, max_concurrent_tasks: 0 });
    assert.deepEqual(me.body.feature_flags.account.quotas, { max_owned_teams: 3 });

    // a owns its personal team + 2 = 3 (max_owned_teams), the 4th is refused
    for (let i = 0; i < 2; i++) assert.equal((await t.http.post('/teams', { display_name: `a${i}` }, { token: tokens.a })).status, 200);
    const owned = await t.http.post('/teams', { display_name: 'a2' }, { token: tokens.a });
    assert.equal(owned.status, 403);
    assert.equal(owned.body.error_code, 'quota_exceeded');
    assert.match(owned.body.error_message, /max_owned_teams/);
    // 3 + b's personal team + b1 = 5 teams in all (max_teams)
    assert.equal((await t.http.post('/teams', { display_name: 'b1' }, { token: tokens.b })).status, 200);
    const all = await t.http.post('/teams', { display_name: 'b2' }, { token: tokens.b });
    assert.equal(all.status, 403);
    assert.match(all.body.error_message, /max_teams/);

    // rate limit: 6 per minute per ip on forgot; the 7th is 429 with Retry-After
    for (let i = 0; i < 6; i++) assert.equal((await t.http.post('/auth/password/forgot', { email_address: 'a@example.test' })).status, 200);
    const limited = await t.http.post('/auth/password/forgot', { email_address: 'a@example.test' });
    assert.equal(limited.status, 429);
    assert.equal(limited.body.error_code, 'rate_limited');
    const ra = Number(limited.headers.get('retry-after'));
    assert.ok(ra >= 1 && ra <= 60, `Retry-After ${ra}`);
    // buckets are per route: login has its own budget (3 of 6 used above)
    assert.equal((await t.http.post('/auth/login', { email_address: 'b@example.test', password: 'a good long password' })).status, 200);
    for (let i = 0; i < 2; i++) await t.http.post('/auth/login', { email_address: 'b@example.test', password: 'wrong password..' });
    const loginLimited = await t.http.post('/auth/login', { email_address: 'b@example.test', password: 'a good long password' });
    assert.equal(loginLimited.status, 429);
    assert.ok(loginLimited.headers.get('retry-after'));
  } finally {
    await t.stop();
  }
});

test('the deployment secret is generated once into the data dir (0600); the signing key is kept in PostgreSQL, encrypted with it', async () => {
  const { statSync, readFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const t = await startTestNode({}, 'idkey');
  try {
    const file = join(t.dataDir, 'secret.key');
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.ok(readFileSync(file, 'utf8').trim().length >= 32);
    const rows = await t.node.db.execute<{ private_enc: string }>('select private_enc from signing_keys');
    assert.equal(rows.length, 1);
    assert.doesNotMatch(rows[0]?.private_enc ?? '', /PRIVATE KEY/);
  } finally {
    await t.stop();
  }
});
