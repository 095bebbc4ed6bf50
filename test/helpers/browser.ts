/**
 * What the browser tests share: Debian's chromium (GANTRY_CHROMIUM overrides /usr/bin/chromium)
 * driven headless by playwright-core, the skip reason where it is missing, the console's build,
 * a page with the tests' viewport and timeout, and a console session written straight into the
 * page's local storage (signed in without the sign-in form).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';

const root = fileURLToPath(new URL('../../', import.meta.url));

export const CHROMIUM = process.env.GANTRY_CHROMIUM ?? '/usr/bin/chromium';

/** Without the background-networking flags Chromium's own connections fail in a closed network;
 * playwright gives every launch a fresh temporary profile (--user-data-dir) itself. */
export const CHROMIUM_ARGS: readonly string[] = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];

const announced = new Set<string>();

/** `false` where chromium is installed; otherwise the reason to skip (naming chromium and how to
 * install it), ending with `consequence`, and printed once as a `# …` line of the test output. */
export function browserSkip(consequence = 'browser tests skipped'): string | false {
  if (existsSync(CHROMIUM)) return false;
  const why = `chromium is not installed (${CHROMIUM} missing; on Debian: apt-get install --no-install-recommends chromium): ${consequence}`;
  if (!announced.has(why)) {
    announced.add(why);
    console.log(`# ${why}`);
  }
  return why;
}

/** Builds the console (console/dist) unless it is there already; fails the caller if the build fails. */
export function buildConsole(): void {
  const b = spawnSync(process.execPath, ['scripts/build-console.mjs', '--if-missing'], { cwd: root, encoding: 'utf8' });
  assert.equal(b.status, 0, b.stderr);
}

/** Headless chromium with the tests' flags. */
export async function launchBrowser(): Promise<Browser> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: [...CHROMIUM_ARGS] });
}

/** A page in a fresh context (its own local storage) of `viewport`, waiting up to 45 s by default. */
export async function newPage(browser: Browser, viewport: { width: number; height: number } = { width: 1280, height: 800 }): Promise<Page> {
  const page = await (await browser.newContext({ viewport })).newPage();
  page.setDefaultTimeout(45_000);
  return page;
}

/** Signs the console in as `user` by storing its session (tokens and team) as the console does,
 * on the console's origin; the next navigation starts signed in. */
export async function signInWithTokens(page: Page, origin: string, user: { accessToken: string; refreshToken: string; teamId: string }): Promise<void> {
  await page.goto(`${origin}/login`);
  await page.evaluate((s) => localStorage.setItem('gantry.console.session', s), JSON.stringify({ tokens: { access_token: user.accessToken, refresh_token: user.refreshToken }, teamId: user.teamId }));
}
