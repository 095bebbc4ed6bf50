/**
 * Single sign-on against a real OpenID provider (`oidc-provider`) started here: the redirect flow
 * through a headless browser (cookies, 302s), the user created on first login, a team role mapped
 * from a group claim, and the refusals: a forged ID token (payload changed, signature kept), an ID
 * token for another audience (validly signed), a wrong nonce, a replayed or unbound state.
 * Registration by password is off on this node: SSO still works.
 */
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { HeadlessBrowser, startTestProvider, type TestProvider } from '../helpers/oidc-provider.js';
import { q } from '../../src/persistence/sql.js';
import { loadConfig } from '../../src/shared/config.js';

let t: TestNode;
let idp: TestProvider;
const TEAM = randomUUID();
const RETURN = 'http://127.0.0.1:5999/sso/done';

before(async () => {
  idp = await startTestProvider();
  const provider = (id: string, extra: Record<string, unknown>) => ({
    id,
    issuer: idp.issuer,
    client_id: idp.clientId,
    client_secret: idp.clientSecret,
    scopes: ['openid', 'email', 'profile', 'groups'],
    allow_insecure_http: true,
    ...extra,
  });
  t = await startTestNode(
    {
      GANTRY_REGISTRATION_ENABLED: false,
      // this file logs in some twenty times from one IP (start and exchange take from the login bucket)
      GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1000,
      GANTRY_OAUTH_PROVIDERS: JSON.stringify([
        provider('corp', { display_name: 'Corp SSO', group_mapping: { claim: 'groups', map: { 'gantry-admins': { team: TEAM, role: 'admin' }, 'gantry-users': { team: TEAM, role: 'member' } } } }),
        provider('other', { display_name: 'Other', link_verified_email: true }),
      ]),
    },
    'sso',
  );
  idp.setRedirectUris([`${t.origin}/api/v1/auth/oidc/corp/callback`, `${t.origin}/api/v1/auth/oidc/other/callback`]);
  idp.accounts.set('alice', { email: 'alice@corp.test', email_verified: true, given_name: 'Alice', family_name: 'Admin', name: 'Alice Admin', groups: ['gantry-admins', 'unrelated'] });
  idp.accounts.set('bob', { email: 'bob@corp.test', email_verified: true, name: 'Bob B', groups: ['gantry-users'] });
  idp.accounts.set('carol', { email: 'carol@corp.test', email_verified: true, name: 'Carol C' });
  idp.accounts.set('dave', { email: 'dave@corp.test', email_verified: true, name: 'Dave D' });
  // the mapped team exists (an operator configures the id of an existing team): owned by a bootstrap user
  const owner = randomUUID();
  await q(t.node.db)(`insert into users (id, email_address, email_normalized, password_hash, first_name, last_name, display_name) values (?, 'root@corp.test', 'root@corp.test', '', 'R', 'R', 'Root')`, [owner]);
  await q(t.node.db)(`insert into teams (id, display_name, owner_id, is_personal) values (?, 'Platform', ?, false)`, [TEAM, owner]);
  await q(t.node.db)(`insert into team_members (team_id, user_id, member_role) values (?, ?, 'owner')`, [TEAM, owner]);
});
after(async () => {
  await t?.stop();
  await idp?.stop();
});

const api = (p: string): string => `${t.baseUrl}${p}`;

/** The redirect flow up to the callback's answer; `edit` may rewrite the provider's authorization URL first. */
async function login(account: string, o: { provider?: string; returnTo?: string | null; edit?: (u: URL) => void; browser?: HeadlessBrowser } = {}) {
  idp.loginAs = account;
  const b = o.browser ?? new HeadlessBrowser();
  const ret = o.returnTo === undefined ? RETURN : o.returnTo;
  const start = await b.request(api(`/auth/oidc/${o.provider ?? 'corp'}/start${ret ? `?return_to=${encodeURIComponent(ret)}` : ''}`));
  assert.equal(start.status, 302, start.text);
  const authz = new URL(start.location!);
  assert.equal(authz.origin, idp.issuer);
  assert.equal(authz.searchParams.get('code_challenge_method'), 'S256');
  assert.ok(authz.searchParams.get('code_challenge') && authz.searchParams.get('state') && authz.searchParams.get('nonce'));
  o.edit?.(authz);
  // through the provider (login + consent interactions) back to our callback
  const cb = await b.follow(authz.toString(), (next) => next.startsWith(api(`/auth/oidc/`)) && next.includes('/callback'));
  assert.ok(cb.stoppedAt, `the provider sent the browser back to the callback (${cb.status} ${cb.url} ${cb.text.replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").slice(-300)})`);
  const res = await b.request(cb.stoppedAt);
  return { browser: b, callbackUrl: cb.stoppedAt, res };
}

const codeFrom = (location: string | null): string => {
  assert.ok(location?.startsWith(RETURN), `redirected to return_to: ${location}`);
  const code = new URL(location!).searchParams.get('sso_code');
  assert.ok(code, `an sso_code: ${location}`);
  return code;
};

async function exchange(code: string) {
  return t.http.post('/auth/oidc/exchange', { sso_code: code });
}

test('server-info lists the providers; password registration is off', async () => {
  const info = await t.http.get('/server-info');
  assert.deepEqual(info.body, { registration_enabled: false, oauth_enabled: true, oauth_providers: [{ id: 'corp', display_name: 'Corp SSO' }, { id: 'other', display_name: 'Other' }], agent_grpc_port: t.node.grpcPort, agent_grpc_tls: false });
  const reg = await t.http.post('/auth/register', { email_address: 'x@corp.test', password: 'password-123456', first_name: 'X', last_name: 'Y' });
  assert.equal(reg.status, 403);
  assert.equal((await t.http.get('/auth/oidc/nope/start')).status, 404);
});

test('login through the redirect flow: user created, team role from the group claim, one-time code', async () => {
  const { res } = await login('alice');
  assert.equal(res.status, 302, res.text);
  const code = codeFrom(res.location);
  const tokens = await exchange(code);
  assert.equal(tokens.status, 200, tokens.text);
  assert.equal(tokens.body.token_type, 'Bearer');
  assert.equal((await exchange(code)).status, 401, 'the code works once');

  const me = await t.http.get('/users/me', { token: tokens.body.access_token });
  assert.equal(me.status, 200);
  assert.equal(me.body.email_address, 'alice@corp.test');
  assert.equal(me.body.display_name, 'Alice Admin');
  const teams = await t.http.get('/teams', { token: tokens.body.access_token });
  const platform = teams.body.team_list.find((x: any) => x.id === TEAM);
  assert.equal(platform?.member_role, 'admin', 'gantry-admins -> admin of the mapped team');
  assert.ok(teams.body.team_list.some((x: any) => x.is_personal), 'and a personal team');
  // the admin role works: an admin-only route of that team
  assert.equal((await t.http.get('/audit-log', { token: tokens.body.access_token, team: TEAM })).status, 200);
  const grant = await q(t.node.db)<{ details: Record<string, unknown> }>(`select * from audit_log where team_id = ? and action = 'member.sso_grant' and actor_user_id = ?`, [TEAM, me.body.id]);
  assert.equal(grant.length, 1);
  assert.equal(grant[0]!.details.member_role, 'admin');
  assert.equal(grant[0]!.details.provider, 'corp');
  // email verified by the provider
  const row = await q(t.node.db)('select email_verified_at, password_hash from users where id = ?', [me.body.id]);
  assert.ok(row[0]!.email_verified_at);
  assert.equal(row[0]!.password_hash, '');
  // no password login for an SSO-only account
  assert.equal((await t.http.post('/auth/login', { email_address: 'alice@corp.test', password: '' })).status, 400);
  assert.equal((await t.http.post('/auth/login', { email_address: 'alice@corp.test', password: 'anything-at-all' })).status, 401);

  // a second login finds the same user (provider + subject), grants nothing new
  const again = await login('alice');
  const tokens2 = await exchange(codeFrom(again.res.location));
  const me2 = await t.http.get('/users/me', { token: tokens2.body.access_token });
  assert.equal(me2.body.id, me.body.id);
  assert.equal((await q(t.node.db)(`select 1 from audit_log where action = 'member.sso_grant' and actor_user_id = ?`, [me.body.id])).length, 1);
  assert.equal((await q(t.node.db)(`select count(*)::int as n from users where email_normalized = 'alice@corp.test'`))[0]!.n, 1);
});

test('member mapping; without return_to the callback answers the code as JSON', async () => {
  const { res } = await login('bob', { returnTo: null });
  assert.equal(res.status, 200, res.text);
  const body = JSON.parse(res.text) as { sso_code: string; expires_in: number };
  assert.ok(body.sso_code && body.expires_in > 0);
  const tokens = await exchange(body.sso_code);
  const teams = await t.http.get('/teams', { token: tokens.body.access_token });
  assert.equal(teams.body.team_list.find((x: any) => x.id === TEAM)?.member_role, 'member');
  assert.equal((await t.http.get('/audit-log', { token: tokens.body.access_token, team: TEAM })).status, 403, 'a member does not read the audit log');
});

test('a forged ID token (payload changed, signature kept) is refused', async () => {
  idp.tamper = 'payload';
  try {
    const { res } = await login('carol', { returnTo: null });
    assert.equal(res.status, 401, res.text);
    assert.equal(JSON.parse(res.text).error_code, 'oidc_id_token_invalid');
  } finally {
    idp.tamper = 'none';
  }
  const users = await q(t.node.db)(`select 1 from users where email_normalized in ('carol@corp.test', 'mallory@example.test')`);
  assert.equal(users.length, 0, 'no account created');
});

test('an ID token for another audience (validly signed by the provider) is refused; the browser goes back with the error', async () => {
  idp.tamper = 'audience';
  try {
    const { res } = await login('carol');
    assert.equal(res.status, 302);
    assert.ok(res.location?.startsWith(RETURN));
    assert.equal(new URL(res.location!).searchParams.get('sso_error'), 'oidc_login_failed');
    assert.equal(new URL(res.location!).searchParams.get('sso_code'), null);
  } finally {
    idp.tamper = 'none';
  }
  assert.equal((await q(t.node.db)(`select 1 from users where email_normalized = 'carol@corp.test'`)).length, 0);
});

test('a wrong nonce is refused', async () => {
  const { res } = await login('carol', { returnTo: null, edit: (u) => u.searchParams.set('nonce', 'not-the-nonce-we-sent') });
  assert.equal(res.status, 401, res.text);
  assert.equal(JSON.parse(res.text).error_code, 'oidc_login_failed');
  assert.match(JSON.parse(res.text).error_message, /nonce/);
  assert.equal((await q(t.node.db)(`select 1 from users where email_normalized = 'carol@corp.test'`)).length, 0);
});

test('a replayed callback, or one from another browser (no binding cookie), is refused', async () => {
  const { res, callbackUrl, browser } = await login('carol', { returnTo: null });
  assert.equal(res.status, 200, res.text);
  const replay = await browser.request(callbackUrl);
  assert.equal(replay.status, 400);
  assert.equal(JSON.parse(replay.text).error_code, 'oidc_state_invalid');

  // login CSRF: a callback URL started by someone else, opened in a browser without the cookie
  idp.loginAs = 'dave';
  const attacker = new HeadlessBrowser();
  const start = await attacker.request(api('/auth/oidc/corp/start'));
  const cb = await attacker.follow(start.location!, (next) => next.includes('/callback'));
  const victim = new HeadlessBrowser();
  const r = await victim.request(cb.stoppedAt!);
  assert.equal(r.status, 400);
  assert.equal(JSON.parse(r.text).error_code, 'oidc_state_invalid');
});

test('linking by verified email is per provider; return_to must be this server or loopback', async () => {
  // dave signs in through "other" first (account created)...
  const first = await login('dave', { provider: 'other' });
  const tokens = await exchange(codeFrom(first.res.location));
  const me = await t.http.get('/users/me', { token: tokens.body.access_token });
  // ...then through "corp" (another identity, same email): corp does not link by email
  const corp = await login('dave', { returnTo: null });
  assert.equal(corp.res.status, 409, corp.res.text);
  assert.equal(JSON.parse(corp.res.text).error_code, 'oidc_account_exists');
  // carol through corp first, then "other" links her by verified email to the same account
  const c1 = await login('carol');
  const c1t = await exchange(codeFrom(c1.res.location));
  const c2 = await login('carol', { provider: 'other' });
  const c2t = await exchange(codeFrom(c2.res.location));
  const id1 = (await t.http.get('/users/me', { token: c1t.body.access_token })).body.id;
  const id2 = (await t.http.get('/users/me', { token: c2t.body.access_token })).body.id;
  assert.equal(id1, id2);
  assert.notEqual(me.body.id, id1);

  const evil = await t.http.get(`/auth/oidc/corp/start?return_to=${encodeURIComponent('https://evil.example/steal')}`);
  assert.equal(evil.status, 400);
});

test('GANTRY_OAUTH_PROVIDERS is validated at start-up', () => {
  assert.throws(() => loadConfig({ GANTRY_OAUTH_PROVIDERS: 'github' }), /GANTRY_OAUTH_PROVIDERS: must be a JSON array/);
  assert.throws(() => loadConfig({ GANTRY_OAUTH_PROVIDERS: JSON.stringify([{ id: 'x', issuer: 'http://idp.example', client_id: 'c' }]) }), /issuer must be https/);
  assert.throws(() => loadConfig({ GANTRY_OAUTH_PROVIDERS: JSON.stringify([{ id: 'x', issuer: 'https://idp.example' }]) }), /client_id/);
  const ok = loadConfig({ GANTRY_OAUTH_PROVIDERS: JSON.stringify([{ id: 'okta', display_name: 'Okta', issuer: 'https://idp.example', client_id: 'c', client_secret: 's' }]) });
  assert.deepEqual(ok.oauthProviders, [{ id: 'okta', display_name: 'Okta' }]);
  assert.doesNotThrow(() => JSON.stringify(ok.oauthProviders).includes('"s"') || undefined);
});
