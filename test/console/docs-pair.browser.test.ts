/**
 * /docs works offline: loading the API reference in Debian's chromium (playwright-core) requests
 * nothing but this node (no font host, no hosted service), and no link on it leads elsewhere. The
 * /pair page (what `gantry login` links to) has a Register link and no stray "Team" label. Skips,
 * naming chromium, where /usr/bin/chromium is missing.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { browserSkip, launchBrowser, newPage } from '../helpers/browser.js';

const skip = browserSkip();

let t: TestNode;
let browser: Browser;
let page: Page;
const requests: string[] = [];
const inflight = new Set<unknown>();

/** Waits until no request has been in flight for `quietMs` (bounded by `capMs`). Playwright's
 * 'networkidle' waits without a bound we can report on; under CI load it timed out with nothing to
 * say. This returns what is still in flight so the assertions below can name it. */
async function settle(quietMs = 1000, capMs = 30_000): Promise<void> {
  const end = Date.now() + capMs;
  let quietSince = Date.now();
  while (Date.now() < end) {
    if (inflight.size > 0) quietSince = Date.now();
    else if (Date.now() - quietSince >= quietMs) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

before(async () => {
  if (skip) return;
  t = await startTestNode({}, 'docs_pair_browser');
  browser = await launchBrowser();
  page = await newPage(browser);
  page.on('request', (r) => { requests.push(r.url()); inflight.add(r); });
  page.on('requestfinished', (r) => inflight.delete(r));
  page.on('requestfailed', (r) => inflight.delete(r));
});
after(async () => {
  if (skip) return;
  await browser?.close();
  await t?.stop();
});

const local = (u: string): boolean => u.startsWith(`${t.origin}/`) || u.startsWith('data:') || u.startsWith('blob:') || u === 'about:blank';

test('/docs requests nothing but this node and links nowhere else', { skip, timeout: 120_000 }, async () => {
  requests.length = 0;
  await page.goto(`${t.origin}/docs`, { waitUntil: 'load' });
  // the reference rendered: an operation of the document is on the page
  await page.getByRole('heading', { name: 'Gantry API' }).first().waitFor();
  await settle();
  assert.ok(requests.some((u) => u.endsWith('/openapi.json')), requests.join('\n'));
  assert.deepEqual(requests.filter((u) => !local(u)), [], 'requests to other hosts');
  const links = await page.evaluate(() => Array.from(document.querySelectorAll('a[href]')).filter((a) => (a as HTMLElement).offsetParent !== null).map((a) => (a as HTMLAnchorElement).href));
  assert.deepEqual(links.filter((u) => /^https?:/.test(u) && !u.startsWith(t.origin)), [], 'visible links to other hosts (hosted-service buttons)');
  assert.equal(await page.getByRole('button', { name: /open api client/i }).count(), 0, 'no "Open API Client" button');
});

test('/pair: a Register link back to the code, no stray Team label', { skip, timeout: 60_000 }, async () => {
  await page.goto(`${t.origin}/pair?code=ABCD-2345`);
  await page.getByRole('heading', { level: 1, name: 'Pair a device' }).waitFor();
  assert.equal(await page.getByText('Team', { exact: true }).isVisible(), false, 'the team label shows only with the team choice');
  const register = page.getByRole('link', { name: 'Register' });
  assert.equal(await register.getAttribute('href'), `/register?next=${encodeURIComponent('/pair?code=ABCD-2345')}`);
});
