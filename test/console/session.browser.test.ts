/**
 * The console's session: single sign-on buttons on the sign-in page from /server-info's providers
 * (a real OpenID provider, `oidc-provider`, started here: the whole redirect flow in chromium ends
 * signed in), and an access token that expires mid-session is refreshed without the user noticing
 * (the node's access tokens live 5 s here; the console keeps working, no sign-in page, no error).
 * Debian's chromium through playwright-core. Skips, naming chromium, where /usr/bin/chromium is missing.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page, Response } from 'playwright-core';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { startTestProvider, type TestProvider } from '../helpers/oidc-provider.js';
import { waitFor } from '../agents/helpers.js';
import { browserSkip, buildConsole, launchBrowser, newPage } from '../helpers/browser.js';

const skip = browserSkip();

let t: TestNode;
let idp: TestProvider;
let user: TestUser;
let browser: Browser;

before(async () => {
  if (skip) return;
  buildConsole();
  idp = await startTestProvider();
  t = await startTestNode(
    {
      GANTRY_ACCESS_TOKEN_TTL_S: 5,
      GANTRY_OAUTH_PROVIDERS: JSON.stringify([{ id: 'corp', display_name: 'Corp SSO', issuer: idp.issuer, client_id: idp.clientId, client_secret: idp.clientSecret, allow_insecure_http: true }]),
    },
    'console_session',
  );
  idp.setRedirectUris([`${t.origin}/api/v1/auth/oidc/corp/callback`]);
  idp.accounts.set('erin', { email: 'erin@corp.test', email_verified: true, given_name: 'Erin', family_name: 'SSO', name: 'Erin SSO' });
  user = await registerUser(t.http);
  browser = await launchBrowser();
});
after(async () => {
  if (skip) return;
  await browser?.close();
  await t?.stop();
  await idp?.stop();
});

const freshPage = (): Promise<Page> => newPage(browser);

const stored = (page: Page): Promise<{ tokens: { access_token: string; refresh_token: string } | null }> => page.evaluate(() => JSON.parse(localStorage.getItem('gantry.console.session') ?? '{"tokens":null}'));

test('the sign-in page has a button per SSO provider of /server-info, and the provider\'s login ends signed in', { skip, timeout: 120_000 }, async () => {
  const page = await freshPage();
  try {
    await page.goto(`${t.origin}/login?next=${encodeURIComponent('/agents')}`);
    const button = page.getByRole('link', { name: 'Sign in with Corp SSO' });
    await button.waitFor();
    const href = new URL((await button.getAttribute('href'))!, t.origin);
    assert.equal(href.pathname, '/api/v1/auth/oidc/corp/start');
    assert.equal(href.searchParams.get('return_to'), `${t.origin}/login?next=%2Fagents`);

    idp.loginAs = 'erin';
    await button.click();
    // provider -> callback -> /login?sso_code=… -> exchanged -> the page asked for
    await page.waitForURL(`${t.origin}/agents`);
    await page.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
    await page.getByText('Erin SSO', { exact: true }).waitFor();
    const s = await stored(page);
    assert.ok(s.tokens, 'signed in');
    const me = await t.http.get('/users/me', { token: s.tokens.access_token });
    assert.equal(me.status, 200);
    assert.equal(me.body.email_address, 'erin@corp.test');
  } finally {
    await page.context().close();
  }
});

test('a refused SSO login says why on the sign-in page', { skip, timeout: 60_000 }, async () => {
  const page = await freshPage();
  try {
    await page.goto(`${t.origin}/login?sso_error=oidc_state_expired`);
    await page.getByRole('alert').filter({ hasText: 'Single sign-on failed: the sign-in took too long' }).waitFor();
  } finally {
    await page.context().close();
  }
});

test('an access token that expires mid-session is refreshed without the user noticing', { skip, timeout: 120_000 }, async () => {
  const page = await freshPage();
  const seen: Array<{ url: string; status: number }> = [];
  const visited: string[] = [];
  page.on('response', (r: Response) => {
    if (r.url().includes('/api/v1/')) seen.push({ url: r.url(), status: r.status() });
  });
  page.on('framenavigated', (f) => {
    if (f === page.mainFrame()) visited.push(new URL(f.url()).pathname);
  });
  try {
    // sign in through the form
    await page.goto(`${t.origin}/login`);
    await page.getByLabel('Email address').fill(user.email);
    await page.getByLabel('Password').fill(user.password);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('heading', { name: 'Workflows', level: 1 }).waitFor();
    const first = (await stored(page)).tokens!;

    // the token the console holds expires (the node refuses it)
    await waitFor('the first access token expired', async () => (await t.http.get('/users/me', { token: first.access_token })).status === 401, 30_000);

    // the user goes on: another page, whose API calls are sent with the expired token first
    await page.getByRole('link', { name: 'Tasks', exact: true }).click();
    await page.getByRole('heading', { name: 'Tasks', level: 1 }).waitFor();
    // the list itself (the heading shows before its data): the refused call answered once sent again;
    // leaving the page sooner would cancel that call and leave nothing to check
    await page.getByText('No tasks match.').waitFor();
    await page.getByRole('link', { name: 'Agents', exact: true }).click();
    await page.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
    await page.getByText('No agents have connected to this team yet.').waitFor();

    // what happened underneath: a 401, one refresh, the same call again answered
    const refreshed = seen.findIndex((r) => r.url.endsWith('/api/v1/auth/refresh') && r.status === 200);
    assert.ok(refreshed >= 0, `a refresh happened: ${JSON.stringify(seen)}`);
    const refused = seen.find((r) => r.status === 401 && !r.url.includes('/api/v1/auth/'));
    assert.ok(refused, `an API call was refused with the expired token: ${JSON.stringify(seen)}`);
    assert.ok(seen.slice(seen.indexOf(refused)).some((r) => r.url === refused.url && r.status === 200), `the refused call was answered once sent again: ${JSON.stringify(seen)}`);
    assert.ok(!visited.slice(1).includes('/login'), `never sent back to the sign-in page: ${visited.join(' ')}`);
    assert.equal(await page.getByRole('alert').count(), 0, 'no error shown');
    const now = (await stored(page)).tokens!;
    assert.notEqual(now.refresh_token, first.refresh_token, 'the refresh token rotated');
    assert.equal((await t.http.get('/users/me', { token: now.access_token })).status, 200, 'the stored access token is the new, valid one');
  } finally {
    await page.context().close();
  }
});
