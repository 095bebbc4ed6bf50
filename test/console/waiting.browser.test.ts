/**
 * A waiting task says why it waits (GET /r/tasks/{id} `waiting_reason`, from the team scheduler's
 * own eligibility rules), on a real node with a real agent process: no agent online; the online
 * agent lacks the workflow's label, or its VRAM; every agent that can run it busy. The console's
 * task page shows the reason. Debian's chromium through playwright-core for the page (skipped,
 * naming chromium, where /usr/bin/chromium is missing; the API checks run regardless).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser } from 'playwright-core';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential, registerUser, type TestUser } from '../helpers/identity.js';
import { spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess } from '../agents/helpers.js';
import { browserSkip, buildConsole, launchBrowser, newPage, signInWithTokens } from '../helpers/browser.js';

const noBrowser = browserSkip('browser test skipped');

let t: TestNode;
let user: TestUser;
let sk = '';
let ak = '';
let agent: AgentProcess | null = null;
let browser: Browser | null = null;

before(async () => {
  t = await startTestNode({}, 'console_waiting');
  user = await registerUser(t.http);
  sk = (await createCredential(t.http, user, 'integration')).value;
  ak = (await createCredential(t.http, user, 'agent')).value;
  for (const [slug, extra] of [
    ['needs-label', { required_labels: ['needs-x'] }],
    ['needs-vram', { min_vram_gb: 24 }],
    ['plain', {}],
  ] as const) {
    const wf = await t.http.post('/workflows', { workflow_slug: slug, display_name: slug, workflow_json: tinyGraph(), parameters: [], ...extra }, { token: user.accessToken, team: user.teamId });
    assert.equal(wf.status, 200, JSON.stringify(wf.body));
  }
});
after(async () => {
  agent?.kill('SIGKILL');
  await agent?.exited;
  await browser?.close();
  await t?.stop();
});

const run = async (slug: string): Promise<string> => {
  const r = await t.http.post(`/r/workflows/slug/${slug}/run`, { parameters: {} }, { token: sk });
  assert.equal(r.status, 202, JSON.stringify(r.body));
  return r.body.task_id as string;
};
const reasonOf = async (taskId: string): Promise<{ status: string; reason: string | undefined }> => {
  const r = await t.http.get(`/r/tasks/${taskId}`, { token: sk });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { status: r.body.task_status, reason: r.body.waiting_reason };
};
/** Waits until the task's reason matches (the scheduler's view follows agents and tasks as they come). */
const reasonMatches = (taskId: string, re: RegExp): Promise<string> =>
  waitFor(`task ${taskId} waits because ${re}`, async () => {
    const r = await reasonOf(taskId);
    return r.reason && re.test(r.reason) ? r.reason : null;
  }, 30_000, 200);

let labelTask = '';

test('waiting_reason: no agent online, then an agent without the label, without the VRAM, and busy', { timeout: 120_000 }, async () => {
  labelTask = await run('needs-label');
  assert.equal(await reasonMatches(labelTask, /^no agent of the team is online$/), 'no agent of the team is online');

  agent = spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', ak, '--executor', 'simulate', '--name', 'plain-box', '--state-dir', tmpDir('gantry-waiting-'), '--simulate-duration-ms', '600000', '--simulate-steps', '2']);
  assert.equal(await reasonMatches(labelTask, /label/), 'no online agent can run it: 1 agent without the label needs-x');

  const vramTask = await run('needs-vram');
  assert.match(await reasonMatches(vramTask, /VRAM/), /^no online agent can run it: 1 agent with 0 GB of VRAM \(the workflow needs 24 GB\)$/);

  // the agent takes a plain task (and keeps it: 10 minutes of simulated work); the next one waits for it
  const first = await run('plain');
  await waitFor('the first plain task running on the agent', async () => ['queued', 'running'].includes((await reasonOf(first)).status), 30_000, 100);
  const second = await run('plain');
  assert.equal(await reasonMatches(second, /busy/), 'every agent that can run it is busy (1 agent)');

  // a task that does not wait has no reason
  assert.equal((await reasonOf(first)).reason, undefined);
  for (const id of [first, second, vramTask]) await t.http.post(`/r/tasks/${id}/cancel`, {}, { token: sk });
});

test('the console\'s task page says why the task waits', { skip: noBrowser, timeout: 90_000 }, async () => {
  buildConsole();
  browser = await launchBrowser();
  const page = await newPage(browser);
  await signInWithTokens(page, t.origin, user);
  await page.goto(`${t.origin}/tasks/${labelTask}`);
  const why = page.getByTestId('waiting-reason');
  await why.waitFor();
  assert.equal(await why.innerText(), 'Waiting: no online agent can run it: 1 agent without the label needs-x');
});
