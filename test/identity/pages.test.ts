/**
 * The links the node emails (verification, password reset) open pages the node serves, and those
 * pages complete the flow. The test follows the link from the real mail in the outbox, GETs the
 * page, checks its Content-Security-Policy admits exactly the inline script it carries, reads from
 * that script which API endpoint it posts to and with which body field, makes that same call, and
 * checks the account: verified (login allowed with verification required) / password changed.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { readOutbox } from '../helpers/identity.js';

const PUBLIC = 'https://gantry.example.test';
let t: TestNode;
before(async () => {
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 10_000, GANTRY_EMAIL_VERIFICATION_REQUIRED: true, GANTRY_PUBLIC_URL: PUBLIC }, 'idpages');
});
after(async () => {
  await t.stop();
});

/** The link in the newest mail of that kind, rebased from GANTRY_PUBLIC_URL onto the test node. */
async function mailLink(to: string, kind: 'email_verification' | 'password_reset' | 'invitation'): Promise<URL> {
  const m = (await readOutbox(t.node, to, kind))[0];
  assert.ok(m, `a ${kind} mail to ${to}`);
  const raw = /https?:\/\/\S+/.exec(m.body_text)?.[0];
  assert.ok(raw, `a link in the ${kind} mail`);
  assert.ok(raw.startsWith(`${PUBLIC}/`), `the link is on GANTRY_PUBLIC_URL: ${raw}`);
  const u = new URL(raw);
  return new URL(`${u.pathname}${u.search}`, t.origin);
}

let seq = 0;
/** Registers through the API (no login: verification is required on this node). */
async function register(): Promise<{ userId: string; email: string; password: string }> {
  const email = `page-${Date.now().toString(36)}-${seq++}@example.test`;
  const password = `page-pw-${Date.now().toString(36)}-Zx4`;
  const r = await t.http.post('/auth/register', { email_address: email, password, first_name: 'Page', last_name: 'User' });
  assert.equal(r.status, 200, r.text);
  return { userId: r.body.id, email, password };
}

interface Page {
  html: string;
  script: string;
  api: string;
  endpoint: string;
}

/** GETs the page and reads the API call its inline script makes. */
async function openPage(link: URL): Promise<Page> {
  const r = await fetch(link);
  const html = await r.text();
  assert.equal(r.status, 200, html);
  assert.match(r.headers.get('content-type') ?? '', /^text\/html/);
  const csp = r.headers.get('content-security-policy') ?? '';
  const scripts = [...html.matchAll(/<script([^>]*)>([\s\S]*?)<\/script>/g)];
  assert.equal(scripts.length, 1, 'one inline script');
  const [, attrs, script] = scripts[0] as RegExpMatchArray;
  assert.equal(attrs, '', 'no external script');
  assert.ok(script);
  const hash = `'sha256-${createHash('sha256').update(script, 'utf8').digest('base64')}'`;
  const directives = new Map(csp.split(';').map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v]));
  assert.deepEqual(directives.get('default-src'), ["'self'"]);
  assert.deepEqual(directives.get('script-src'), [hash], 'script-src allows exactly the inline script');
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/);
  assert.doesNotMatch(html, /\b(src|href)=/i, 'no external assets');
  // the token is not reflected into the HTML (the script reads it from the URL)
  const token = link.searchParams.get('token');
  assert.ok(token && !html.includes(token));
  const api = /var API = "([^"]+)"/.exec(script)?.[1];
  const endpoint = /post\("([^"]+)"/.exec(script)?.[1];
  assert.ok(api && endpoint, 'the script names the endpoint it posts to');
  return { html, script, api, endpoint };
}

test('the verification link opens a page whose call verifies the account', async () => {
  const u = await register();
  const before = await t.http.post('/auth/login', { email_address: u.email, password: u.password });
  assert.equal(before.status, 403);
  assert.equal(before.body.error_code, 'email_not_verified');

  const link = await mailLink(u.email, 'email_verification');
  assert.equal(link.pathname, '/verify-email');
  const p = await openPage(link);
  assert.match(p.script, /verification_token: token/);
  // what the page's script does: POST {verification_token} to the endpoint it names
  const r = await fetch(new URL(`${p.api}${p.endpoint}`, t.origin), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ verification_token: link.searchParams.get('token') }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  assert.deepEqual(await r.json(), { is_success: true });

  const after = await t.http.post('/auth/login', { email_address: u.email, password: u.password });
  assert.equal(after.status, 200, after.text);
  const rows = await t.node.db.execute<{ email_verified_at: Date | null }>('select email_verified_at from users where id = ?', [u.userId]);
  assert.ok(rows[0]?.email_verified_at);
});

test('the password-reset link opens a page with a form whose call changes the password', async () => {
  const u = await register();
  // verified first (verification is required for login on this node)
  const vlink = await mailLink(u.email, 'email_verification');
  const v = await t.http.post('/auth/email/verify', { verification_token: vlink.searchParams.get('token') });
  assert.equal(v.status, 200, v.text);

  const forgot = await t.http.post('/auth/password/forgot', { email_address: u.email });
  assert.equal(forgot.status, 200, forgot.text);
  const link = await mailLink(u.email, 'password_reset');
  assert.equal(link.pathname, '/reset-password');
  const p = await openPage(link);
  assert.match(p.html, /<form id="reset"/);
  assert.match(p.html, /<input id="new_password"[^>]*type="password"/);
  assert.match(p.script, /reset_token: token, new_password: pw/);

  const newPassword = `page-reset-${Date.now().toString(36)}-Qw8`;
  const r = await fetch(new URL(`${p.api}${p.endpoint}`, t.origin), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ reset_token: link.searchParams.get('token'), new_password: newPassword }),
  });
  assert.equal(r.status, 200, await r.clone().text());

  const old = await t.http.post('/auth/login', { email_address: u.email, password: u.password });
  assert.equal(old.status, 401);
  const fresh = await t.http.post('/auth/login', { email_address: u.email, password: newPassword });
  assert.equal(fresh.status, 200, fresh.text);
});

test('the invitation link opens a page that signs the invited user in and accepts: they join the team', async () => {
  // the inviting owner (verified, logged in)
  const owner = await register();
  const ov = await t.http.post('/auth/email/verify', { verification_token: (await mailLink(owner.email, 'email_verification')).searchParams.get('token') });
  assert.equal(ov.status, 200, ov.text);
  const ol = await t.http.post('/auth/login', { email_address: owner.email, password: owner.password });
  const me = await t.http.get('/users/me', { token: ol.body.access_token });
  const teamId = me.body.team_list[0].id as string;
  // the invited user has an account (verified)
  const guest = await register();
  const gv = await t.http.post('/auth/email/verify', { verification_token: (await mailLink(guest.email, 'email_verification')).searchParams.get('token') });
  assert.equal(gv.status, 200, gv.text);
  const inv = await t.http.post('/teams/current/invitations', { email_address: guest.email, member_role: 'member' }, { token: ol.body.access_token, team: teamId });
  assert.ok(inv.status < 300, inv.text);

  const link = await mailLink(guest.email, 'invitation');
  assert.equal(link.pathname, '/accept-invitation');
  const p = await openPage(link);
  assert.match(p.html, /<form id="accept"/);
  assert.equal(p.endpoint, '/auth/login', 'the page signs in first');
  assert.match(p.script, /"\/invitations\/accept"/);
  assert.match(p.script, /invitation_token: token/);
  // what the page's script does: log in, then accept with that access token
  const login = await fetch(new URL(`${p.api}${p.endpoint}`, t.origin), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email_address: guest.email, password: guest.password }) });
  const { access_token } = (await login.json()) as { access_token: string };
  const accept = await fetch(new URL(`${p.api}/invitations/accept`, t.origin), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${access_token}` },
    body: JSON.stringify({ invitation_token: link.searchParams.get('token') }),
  });
  assert.equal(accept.status, 200, await accept.clone().text());
  const guestMe = await t.http.get('/users/me', { token: access_token });
  assert.ok((guestMe.body.team_list as Array<{ id: string }>).some((x) => x.id === teamId), 'the invited user is a member of the team');
});

test('a page opened without a token still answers 200 and reflects nothing from the query', async () => {
  const r = await fetch(new URL('/reset-password?token=%3Cscript%3Ealert(1)%3C%2Fscript%3E&x=%22%3E', t.origin));
  const html = await r.text();
  assert.equal(r.status, 200);
  assert.doesNotMatch(html, /alert\(1\)/);
  assert.equal(html.match(/<script/g)?.length, 1);
});
