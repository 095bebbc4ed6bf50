/**
 * Console details a new user met: a task page names its agent (not an id fragment) and its events
 * read "status: pending" (not "status status pending"); an agent without GPUs shows "no GPU" for
 * VRAM (not "0.0 / 0 GB"). Debian's chromium through playwright-core, against a real node and a
 * simulate agent. Skips, naming chromium, where /usr/bin/chromium is missing.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential, registerUser, type TestUser } from '../helpers/identity.js';
import { spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess } from '../agents/helpers.js';
import { browserSkip, buildConsole, launchBrowser, newPage, signInWithTokens } from '../helpers/browser.js';

const skip = browserSkip();

let t: TestNode;
let user: TestUser;
let browser: Browser;
let page: Page;
let agent: AgentProcess | null = null;
let taskId = '';

before(async () => {
  if (skip) return;
  buildConsole();
  t = await startTestNode({}, 'console_details');
  user = await registerUser(t.http);
  const ak = await createCredential(t.http, user, 'agent');
  agent = spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', ak.value, '--executor', 'simulate', '--name', 'render-box-1', '--state-dir', tmpDir('gantry-console-details-'), '--simulate-duration-ms', '300', '--simulate-steps', '2']);
  const wf = await t.http.post('/workflows', { workflow_slug: 'details-wf', display_name: 'Details', workflow_json: tinyGraph(), parameters: [] }, { token: user.accessToken, team: user.teamId });
  assert.equal(wf.status, 200, JSON.stringify(wf.body));
  const sk = await createCredential(t.http, user, 'integration');
  await waitFor('the agent online', async () => ((await t.http.get('/r/agents', { token: sk.value })).body.agent_list ?? []).some((a: { agent_status: string }) => a.agent_status === 'online'), 60_000);
  const run = await t.http.post('/r/workflows/slug/details-wf/run', { parameters: {} }, { token: sk.value });
  assert.equal(run.status, 202, JSON.stringify(run.body));
  taskId = run.body.task_id;
  await waitFor('the task completed', async () => (await t.http.get(`/r/tasks/${taskId}`, { token: sk.value })).body.task_status === 'completed', 60_000);
  browser = await launchBrowser();
  page = await newPage(browser);
  await signInWithTokens(page, t.origin, user);
});
after(async () => {
  if (skip) return;
  agent?.kill('SIGKILL');
  await agent?.exited;
  await browser?.close();
  await t?.stop();
});

test('task page: the agent by name, events as "status: pending"', { skip, timeout: 120_000 }, async () => {
  await page.goto(`${t.origin}/tasks/${taskId}`);
  const events = page.locator('ol.events li');
  await events.filter({ hasText: 'completed' }).first().waitFor();
  const texts = (await events.allInnerTexts()).map((x) => x.replace(/\s+/g, ' '));
  assert.ok(texts.some((x) => /status: (pending|queued|running)$/.test(x)), texts.join('\n'));
  assert.ok(!texts.some((x) => /status status/.test(x)), texts.join('\n'));
  await page.getByRole('link', { name: 'render-box-1' }).waitFor();
});

test('agents page: an agent without GPUs says "no GPU" for VRAM', { skip, timeout: 60_000 }, async () => {
  await page.goto(`${t.origin}/agents`);
  const row = page.locator('[data-agent="render-box-1"]');
  await row.waitFor();
  const text = (await row.innerText()).replace(/\s+/g, ' ');
  assert.match(text, /no GPU/, text);
  assert.doesNotMatch(text, /0\.0 \/ 0 GB/, text);
});

test('the tasks filter takes a workflow slug', { skip, timeout: 60_000 }, async () => {
  await page.goto(`${t.origin}/tasks`);
  await page.getByLabel('Workflow').fill('details-wf');
  await page.getByLabel('Workflow').press('Enter');
  await page.waitForURL(/[?&]workflow=details-wf/);
  await page.locator(`a[href="/tasks/${taskId}"]`).first().waitFor();
});

test('the Agents page hint names this node\'s real gRPC port and WebSocket address, with npx gantry agent --executor simulate', { skip, timeout: 60_000 }, async () => {
  await page.goto(`${t.origin}/agents`);
  const ws = await page.locator('[data-hint="ws"]').innerText();
  assert.equal(ws, `npx gantry agent --executor simulate --server ${t.origin.replace(/^http/, 'ws')} --credential ak-…`);
  // the test node's gRPC port is an ephemeral one, not the default 50051
  assert.notEqual(t.node.grpcPort, 50051);
  assert.equal(await page.locator('[data-hint="grpc"]').innerText(), `npx gantry agent --executor simulate --server ${new URL(t.origin).hostname}:${t.node.grpcPort} --credential ak-…`);
});

test('390 px wide: no page is cut off horizontally', { skip, timeout: 120_000 }, async () => {
  await page.setViewportSize({ width: 390, height: 800 });
  for (const path of ['/workflows', '/tasks', `/tasks/${taskId}`, '/agents', '/pair', '/credentials', '/services']) {
    await page.goto(`${t.origin}${path}`);
    await page.getByRole('heading', { level: 1 }).first().waitFor();
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    const widest = await page.evaluate(() => Array.from(document.querySelectorAll('body *')).filter((e) => e.getBoundingClientRect().right > 392 && (e.parentElement?.getBoundingClientRect().right ?? 0) <= 392).map((e) => `${e.tagName}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`).slice(-3).join(', '));
    assert.ok(width <= 390, `${path} is ${width} px wide at a 390 px viewport (${widest})`);
  }
  await page.setViewportSize({ width: 1280, height: 800 });
});

test('a workflow\'s versions page through (no silent first page)', { skip, timeout: 120_000 }, async () => {
  const wf = await t.http.get('/workflows?per_page=100', { token: user.accessToken, team: user.teamId });
  const id = (wf.body.workflow_list as Array<{ id: string; workflow_slug: string }>).find((w) => w.workflow_slug === 'details-wf')!.id;
  for (let v = 2; v <= 22; v++) {
    const r = await t.http.put(`/workflows/${id}`, { workflow_json: tinyGraph(v), snapshot_note: `v${v}` }, { token: user.accessToken, team: user.teamId });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  await page.goto(`${t.origin}/workflows/${id}`);
  const pager = page.getByRole('navigation', { name: 'Pagination' });
  await pager.getByText('Page 1 of 2').waitFor();
  await pager.getByRole('button', { name: 'Next' }).click();
  await pager.getByText('Page 2 of 2').waitFor();
});
