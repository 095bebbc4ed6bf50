/**
 * The web console in a real browser: Debian's chromium driven headless by playwright-core against a
 * real node (PostgreSQL, the console built by Vite and served at /) with the real agent program
 * (`gantry agent --executor simulate`) as a child process. Registers, creates an agent credential
 * and starts the agent with it, creates a workflow from a JSON file, runs it from the generated form
 * (validation, a file input staged through presign), watches the SSE progress bar reach 100 % and
 * the image preview appear, cancels another run, creates and revokes an sk-, confirms a
 * device-pairing code, and takes a screenshot of every page (test-artifacts/console/*.png) at 1280
 * and at 390 pixels wide. Skips, naming chromium, where /usr/bin/chromium is missing.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync } from 'node:zlib';
import type { Browser, Page } from 'playwright-core';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { spawnAgent, tinyGraph, tmpDir, type AgentProcess } from '../agents/helpers.js';
import { makePki, Receiver, type Pki } from '../events/helpers.js';
import { browserSkip, buildConsole, launchBrowser, newPage } from '../helpers/browser.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const skip = browserSkip('console browser tests skipped');

const ARTIFACTS = join(root, 'test-artifacts', 'console');
const PNG_SIG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

let t: TestNode;
let pki: Pki;
let receiver: Receiver;
let browser: Browser;
let page: Page;
let work: string;
const agents: AgentProcess[] = [];
const email = `console-${Date.now().toString(36)}@example.test`;
const password = 'console-password-1';
const slug = `console-wf-${Date.now().toString(36)}`;
let workflowId = '';
let completedTaskId = '';
let agentCredential = '';

/** A tiny valid PNG (2x2, RGB) for the file input. */
function tinyPng(): Buffer {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (b: Buffer): number => {
    let c = 0xffffffff;
    for (const x of b) c = (crcTable[(c ^ x) & 0xff] as number) ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type: string, data: Buffer): Buffer => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const c = Buffer.alloc(4);
    c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(2, 0);
  ihdr.writeUInt32BE(2, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  const raw = Buffer.from([0, 255, 0, 0, 0, 255, 0, 0, 0, 0, 255, 255, 255, 255]);
  return Buffer.concat([PNG_SIG, chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** The console's session (tokens and team) as the browser stored it: the test checks the API with it. */
async function consoleSession(): Promise<{ token: string; team: string }> {
  const raw = await page.evaluate(() => localStorage.getItem('gantry.console.session'));
  const s = JSON.parse(raw ?? 'null') as { tokens: { access_token: string }; teamId: string } | null;
  assert.ok(s?.tokens?.access_token && s.teamId, 'the console keeps a session');
  return { token: s.tokens.access_token, team: s.teamId };
}

async function go(path: string, heading: string | RegExp): Promise<void> {
  await page.goto(`${t.origin}${path}`);
  await page.getByRole('heading', { level: 1, name: heading }).waitFor();
}

before(async () => {
  if (skip) return;
  buildConsole();
  mkdirSync(ARTIFACTS, { recursive: true });
  work = mkdtempSync(join(tmpdir(), 'gantry-console-'));
  // an https webhook receiver with its own CA, trusted by the node for outbound calls
  pki = makePki();
  receiver = await new Receiver(pki, () => Date.now()).start('localhost');
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_OUTBOUND_CA_FILE: pki.caFile }, 'console_browser');
  browser = await launchBrowser();
  page = await newPage(browser);
  // the revoke/delete buttons ask confirm(): accept
  page.on('dialog', (d) => void d.accept());
});

after(async () => {
  for (const a of agents) a.kill('SIGKILL');
  await Promise.all(agents.map((a) => a.exited));
  await browser?.close();
  await t?.stop();
  await receiver?.stop();
  pki?.cleanup();
  if (work) rmSync(work, { recursive: true, force: true });
});

test('register: / sends a signed-out browser to sign in; registering signs in and opens the workflows', { skip }, async () => {
  await page.goto(`${t.origin}/`);
  await page.waitForURL(/\/login$/);
  await page.getByRole('heading', { name: 'Sign in to Gantry' }).waitFor();
  await shot('01-login-1280');
  await page.getByRole('link', { name: 'Register' }).click();
  await page.getByRole('heading', { name: 'Create a Gantry account' }).waitFor();
  await page.getByLabel('First name').fill('Ada');
  await page.getByLabel('Last name').fill('Console');
  await page.getByLabel('Email address').fill(email);
  // a too-short password is refused by the form's own validation (the browser keeps the page)
  await page.getByLabel(/^Password/).fill('short');
  await page.getByRole('button', { name: 'Register' }).click();
  assert.equal(await page.locator('#new_password').evaluate((el: HTMLInputElement) => el.validity.valid), false);
  await page.getByLabel(/^Password/).fill(password);
  await shot('02-register-1280');
  await page.getByRole('button', { name: 'Register' }).click();
  await page.waitForURL(/\/workflows$/);
  await page.getByRole('heading', { level: 1, name: 'Workflows' }).waitFor();
  // the team switcher shows the personal team; the session is the API's
  const team = await page.getByLabel('Team').inputValue();
  const s = await consoleSession();
  assert.equal(team, s.team);
  const me = await t.http.get('/users/me', { token: s.token });
  assert.equal(me.status, 200);
  assert.equal(me.body.email_address, email);
});

test('credentials: an agent credential shown once starts the simulated agent; the fleet table shows it live', { skip }, async () => {
  await go('/credentials', 'Credentials');
  await page.getByLabel('Type').selectOption('agent');
  await page.getByLabel('Name (visible to the team)').fill('sim agent');
  await page.getByRole('button', { name: 'Create credential' }).click();
  const ak = await page.getByTestId('credential-value').inputValue();
  assert.match(ak, /^ak-[0-9A-Za-z]{49}$/);
  agentCredential = ak;
  agents.push(
    spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', ak, '--executor', 'simulate', '--state-dir', tmpDir('gantry-console-agent-'), '--gpu', 'NVIDIA RTX 4090:24', '--labels', 'sim,console', '--name', 'console-sim', '--simulate-duration-ms', '4000', '--simulate-steps', '8']),
  );
  await go('/agents', 'Agents');
  // no reload: the table refreshes itself until the agent appears online
  const row = page.locator('tr[data-agent="console-sim"]');
  await row.waitFor({ timeout: 30_000 });
  await row.getByText(/online|busy/).waitFor({ timeout: 30_000 });
  const text = await row.innerText();
  assert.match(text, /NVIDIA RTX 4090/);
  assert.match(text, /24/);
  assert.match(text, /sim/);
  assert.match(text, /console/);
  await shot('03-agents-1280');
});

test('workflows: create from a JSON file; the detail shows the version, its snapshot and a form generated from the ParameterDefs', { skip }, async () => {
  const doc = {
    workflow_slug: slug,
    display_name: 'Console fox',
    description: 'made by the console test',
    workflow_json: tinyGraph(4, { '10': { class_type: 'LoadImage', inputs: { image: 'input.png' } } }),
    parameters: [
      { key: 'prompt', label: 'Prompt', node_id: '6', field: 'text', required: true, description: 'what to draw' },
      { key: 'steps', label: 'Steps', node_id: '3', field: 'steps', min: 1, max: 50, default: 4 },
      { key: 'sampler', label: 'Sampler', node_id: '3', field: 'sampler_name', options: ['euler', 'dpmpp_2m'], default: 'euler' },
      { key: 'init_image', label: 'Init image', node_id: '10', field: 'image', type: 'file', accept: ['image/png'] },
    ],
    required_labels: ['sim'],
    max_retries: 0,
  };
  const file = join(work, 'workflow.json');
  writeFileSync(file, JSON.stringify(doc));
  // a file that is not JSON is reported, nothing is created
  const bad = join(work, 'broken.json');
  writeFileSync(bad, '{"workflow_slug": ');
  await go('/workflows', 'Workflows');
  await page.getByLabel('Workflow JSON file').setInputFiles(bad);
  await page.getByRole('alert').getByText('broken.json is not valid JSON').waitFor();
  await page.getByLabel('Workflow JSON file').setInputFiles(file);
  await page.waitForURL(/\/workflows\/[0-9a-f-]{36}$/);
  workflowId = page.url().split('/').pop() as string;
  await page.getByRole('heading', { level: 1, name: 'Console fox' }).waitFor();
  const s = await consoleSession();
  const api = await t.http.get(`/workflows/${workflowId}`, { token: s.token, team: s.team });
  assert.equal(api.status, 200);
  assert.equal(api.body.workflow_slug, slug);
  // versions and snapshots
  await page.getByRole('table').filter({ hasText: 'created' }).getByText(`${slug}@1`).waitFor();
  // the generated form: one control per parameter, typed
  assert.equal(await page.getByLabel('Prompt (required)').getAttribute('type'), 'text');
  assert.equal(await page.getByLabel('Steps').getAttribute('type'), 'number');
  assert.equal(await page.getByLabel('Steps').inputValue(), '4');
  assert.equal(await page.getByLabel('Sampler').evaluate((el) => el.tagName), 'SELECT');
  assert.equal(await page.getByLabel('Init image').getAttribute('type'), 'file');
  assert.equal(await page.getByLabel('Init image').getAttribute('accept'), 'image/png');
  await shot('04-workflow-detail-1280');
  // the list shows it
  await go('/workflows', 'Workflows');
  await page.getByRole('link', { name: 'Console fox' }).waitFor();
  await shot('05-workflows-1280');
});

test('run from the generated form: validation, a file staged through presign, the SSE progress bar reaching 100 %, the image preview', { skip }, async () => {
  await go(`/workflows/${workflowId}`, 'Console fox');
  // validation: the required prompt is missing and steps is out of range; nothing is submitted
  await page.getByLabel('Steps').fill('999');
  await page.getByRole('button', { name: 'Run workflow' }).click();
  await page.getByText('Prompt is required').waitFor();
  await page.getByText('Steps must be at most 50').waitFor();
  assert.equal(await page.getByLabel('Prompt (required)').getAttribute('aria-invalid'), 'true');
  assert.match(page.url(), /\/workflows\//);
  await shot('06-run-form-validation-1280');
  await page.getByLabel('Prompt (required)').fill('a red fox in the snow');
  await page.getByLabel('Steps').fill('8');
  await page.getByLabel('Sampler').selectOption('dpmpp_2m');
  await page.getByLabel('Init image').setInputFiles({ name: 'init.png', mimeType: 'image/png', buffer: tinyPng() });
  await page.getByRole('button', { name: 'Run workflow' }).click();
  await page.waitForURL(/\/tasks\/[0-9a-f-]{36}$/);
  completedTaskId = page.url().split('/').pop() as string;
  // record every value the progress bar takes (driven by the SSE stream)
  const bar = page.locator('#task-progress');
  await bar.waitFor();
  await page.evaluate(() => {
    const el = document.getElementById('task-progress') as HTMLProgressElement;
    const seen: number[] = [el.value];
    (window as unknown as { __seen: number[] }).__seen = seen;
    new MutationObserver(() => seen.push(el.value)).observe(el, { attributes: true });
  });
  await page.locator('h1').getByText('running').waitFor({ timeout: 30_000 });
  await shot('07-task-running-1280');
  await page.waitForFunction(() => (document.getElementById('task-progress') as HTMLProgressElement | null)?.value === 100, undefined, { timeout: 30_000 });
  await page.locator('h1').getByText('completed').waitFor();
  const seen = await page.evaluate(() => (window as unknown as { __seen: number[] }).__seen);
  assert.ok(seen.some((v) => v > 0 && v < 100), `intermediate progress shown: ${JSON.stringify(seen)}`);
  assert.equal(seen.at(-1), 100);
  assert.equal(await page.getByTestId('progress-percent').innerText(), '100%');
  // the preview is the real output image, loaded
  const img = page.getByRole('img', { name: /Result preview/ });
  await img.waitFor();
  await page.waitForFunction(() => {
    const i = document.querySelector('img.preview') as HTMLImageElement | null;
    return !!i && i.complete && i.naturalWidth > 0;
  });
  const href = await page.getByRole('link', { name: /^Download / }).getAttribute('href');
  assert.ok(href);
  const dl = await fetch(new URL(href, t.origin));
  assert.equal(dl.status, 200);
  assert.ok(Buffer.from(await dl.arrayBuffer()).subarray(0, 8).equals(PNG_SIG), 'the download is a PNG');
  // the event log lists the stream's events
  const events = await page.locator('ol.events').innerText();
  assert.match(events, /status/);
  assert.match(events, /progress/);
  assert.match(events, /completed/);
  // the server agrees, and got the staged file as the file parameter
  const s = await consoleSession();
  const task = await t.http.get(`/r/tasks/${completedTaskId}`, { token: s.token, team: s.team });
  assert.equal(task.body.task_status, 'completed');
  assert.equal(task.body.parameters.prompt, 'a red fox in the snow');
  assert.equal(task.body.parameters.steps, 8);
  assert.equal(task.body.parameters.sampler, 'dpmpp_2m');
  assert.match(String(task.body.parameters.init_image), new RegExp(`^teams/${s.team}/inputs/`));
  await shot('08-task-completed-1280');
});

test('cancel another run from its task page', { skip }, async () => {
  await go(`/workflows/${workflowId}`, 'Console fox');
  await page.getByLabel('Prompt (required)').fill('a run to cancel');
  await page.getByRole('button', { name: 'Run workflow' }).click();
  await page.waitForURL(/\/tasks\/[0-9a-f-]{36}$/);
  const id = page.url().split('/').pop() as string;
  assert.notEqual(id, completedTaskId);
  await page.getByRole('button', { name: 'Cancel task' }).click();
  await page.locator('h1').getByText('cancelled').waitFor();
  await page.locator('ol.events').getByText('cancelled').first().waitFor();
  await page.getByRole('button', { name: 'Cancel task' }).waitFor({ state: 'detached' });
  const s = await consoleSession();
  const task = await t.http.get(`/r/tasks/${id}`, { token: s.token, team: s.team });
  assert.equal(task.body.task_status, 'cancelled');
  await shot('09-task-cancelled-1280');
  // the live task list, filtered
  await go('/tasks', 'Tasks');
  await page.getByLabel('Status').selectOption('cancelled');
  await page.waitForURL(/task_status=cancelled/);
  // the list reloads with the filter: the completed task leaves it, the cancelled one stays
  await page.locator(`a[href="/tasks/${completedTaskId}"]`).waitFor({ state: 'detached' });
  await page.locator(`a[href="/tasks/${id}"]`).waitFor();
  await page.getByLabel('Status').selectOption('');
  await page.locator(`a[href="/tasks/${completedTaskId}"]`).waitFor();
  await shot('10-tasks-1280');
});

test('credentials: an sk- is shown once, works, and stops working when revoked', { skip }, async () => {
  await go('/credentials', 'Credentials');
  await page.getByLabel('Type').selectOption('integration');
  await page.getByLabel('Name (visible to the team)').fill('ci key');
  await page.getByLabel(/^Expires in days/).fill('30');
  await page.getByRole('button', { name: 'Create credential' }).click();
  const sk = await page.getByTestId('credential-value').inputValue();
  assert.match(sk, /^sk-[0-9A-Za-z]{49}$/);
  const row = page.locator('tr[data-credential="ci key"]');
  await row.waitFor();
  assert.match(await row.innerText(), new RegExp(sk.slice(0, 12)));
  await shot('11-credentials-created-1280');
  assert.equal((await t.http.get('/r/workflows', { token: sk })).status, 200);
  // shown once: after Done, the value is nowhere on the page
  await page.getByRole('button', { name: 'Done' }).click();
  assert.equal(await page.getByTestId('credential-value').count(), 0);
  assert.ok(!(await page.content()).includes(sk));
  await page.getByRole('button', { name: 'Revoke ci key' }).click();
  await row.waitFor({ state: 'detached' });
  assert.equal((await t.http.get('/r/workflows', { token: sk })).status, 401);
  await shot('12-credentials-revoked-1280');
});

test('device pairing: the code `gantry login` shows is confirmed in the console; the device then gets its credentials', { skip }, async () => {
  const start = await t.http.post('/desktop/pair/start', { device_name: 'console laptop' });
  assert.equal(start.status, 200);
  await go('/devices', 'Pair a device');
  await page.getByLabel('Pairing code').fill(String(start.body.user_code).toLowerCase());
  await page.getByRole('button', { name: 'Confirm pairing' }).click();
  await page.getByText(/is paired with/).waitFor();
  await shot('13-pair-1280');
  const poll = await t.http.post('/desktop/pair/poll', { pairing_id: start.body.pairing_id, poll_secret: start.body.poll_secret });
  assert.equal(poll.status, 200);
  assert.equal(poll.body.pairing_status, 'confirmed');
  assert.match(poll.body.device_credential, /^dk-/);
  // a wrong code is reported
  await page.getByLabel('Pairing code').fill('ZZZZ-9999');
  await page.getByRole('button', { name: 'Confirm pairing' }).click();
  await page.getByRole('alert').waitFor();
});

test('webhooks: create, the delivery log of a run, redeliver, disable', { skip }, async () => {
  await go('/webhooks', 'Webhooks');
  await page.getByLabel('Name').fill('ops hook');
  await page.getByLabel(/^URL/).fill(receiver.url);
  await page.getByRole('button', { name: 'Create webhook' }).click();
  await page.getByRole('heading', { level: 1, name: /ops hook/ }).waitFor();
  await page.locator('h1').getByText('active').waitFor();
  await page.getByRole('button', { name: 'Show' }).click();
  const secret = await page.locator('dl.facts code').innerText();
  assert.ok(secret.length >= 16 && !secret.includes('•'), 'the signing secret is shown on request');
  // a run now is delivered; the log (refreshed every 5 s) shows it succeeded
  const s = await consoleSession();
  const run = await t.http.post(`/r/workflows/${workflowId}/run`, { parameters: { prompt: 'for the webhook' } }, { token: s.token, team: s.team });
  assert.equal(run.status, 202, run.text);
  await receiver.waitFor(1, 30_000);
  const rows = page.locator('section[aria-labelledby="deliveries-h"] tbody tr');
  await rows.first().getByText('succeeded').waitFor({ timeout: 20_000 });
  assert.match(await rows.first().innerText(), /task\.completed/);
  assert.match(await rows.first().innerText(), /200/);
  await shot('14-webhook-deliveries-1280');
  // redeliver: the receiver gets the same signed body again, the log gets a second delivery
  await rows.first().getByRole('button', { name: 'Redeliver' }).click();
  await receiver.waitFor(2, 20_000);
  assert.equal(receiver.received[1]?.body, receiver.received[0]?.body);
  await page.waitForFunction(() => document.querySelectorAll('section[aria-labelledby="deliveries-h"] tbody tr').length >= 2, undefined, { timeout: 20_000 });
  await page.getByRole('button', { name: 'Disable' }).click();
  await page.locator('h1').getByText('disabled').waitFor();
  await shot('14-webhook-disabled-1280');
  await go('/webhooks', 'Webhooks');
  await page.getByRole('link', { name: 'ops hook' }).waitFor();
  await shot('15-webhooks-1280');
});

test('members, notifications and services pages', { skip }, async () => {
  await go('/members', 'Members');
  await page.getByRole('cell', { name: email, exact: true }).waitFor();
  await page.getByLabel('Email address').fill('colleague@example.test');
  await page.getByRole('button', { name: 'Invite' }).click();
  await page.getByRole('cell', { name: 'colleague@example.test', exact: true }).waitFor();
  await shot('16-members-1280');

  await go('/notifications', 'Notifications');
  // the completed and the cancelled run notified the user who ran them
  await page.waitForFunction(() => document.querySelectorAll('ul.notifications li').length >= 2, undefined, { timeout: 20_000 });
  await shot('17-notifications-1280');
  await page.getByRole('button', { name: 'Mark all read' }).click();
  await page.getByText('0 unread').waitFor();

  await go('/services', 'Container services');
  await page.getByText('No container services').waitFor();
  await shot('18-services-1280');
});

test('a failed task links to its retry and the retry back to it', { skip }, async () => {
  // a second agent whose every task fails, for a workflow only it can run, with one retry
  agents.push(spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', agentCredential, '--executor', 'simulate', '--state-dir', tmpDir('gantry-console-agent-'), '--labels', 'flaky', '--name', 'flaky-sim', '--simulate-duration-ms', '200', '--simulate-steps', '2', '--simulate-fail=boom']));
  const s = await consoleSession();
  const wf = await t.http.post('/workflows', { workflow_slug: `${slug}-flaky`, display_name: 'Flaky', workflow_json: tinyGraph(), parameters: [{ key: 'prompt', node_id: '6', field: 'text' }], required_labels: ['flaky'], max_retries: 1 }, { token: s.token, team: s.team });
  assert.equal(wf.status, 200, wf.text);
  const run = await t.http.post(`/r/workflows/${wf.body.id}/run`, { parameters: { prompt: 'x' } }, { token: s.token, team: s.team });
  assert.equal(run.status, 202, run.text);
  const first = run.body.task_id as string;
  await go(`/tasks/${first}`, /Task/);
  await page.locator('h1').getByText('failed').waitFor({ timeout: 30_000 });
  await page.getByRole('alert').getByText(/boom/).first().waitFor();
  const retried = page.locator('dl.facts dt:text-is("Retried as") + dd a');
  await retried.waitFor();
  const retryId = ((await retried.getAttribute('href')) ?? '').split('/').pop() as string;
  assert.match(retryId, /^[0-9a-f-]{36}$/);
  await shot('23-task-failed-1280');
  await retried.click();
  await page.waitForURL(new RegExp(`/tasks/${retryId}$`));
  await page.locator('h1').getByText('failed').waitFor({ timeout: 30_000 });
  const back = page.locator('dl.facts dt:text-is("Retry of") + dd a');
  assert.equal(await back.getAttribute('href'), `/tasks/${first}`);
  assert.match(await page.locator('dl.facts').innerText(), /Attempt\s+2/);
});

test('390 pixels wide: the navigation folds into a keyboard-operable menu; pages stay usable', { skip }, async () => {
  await page.setViewportSize({ width: 390, height: 844 });
  await go(`/tasks/${completedTaskId}`, /Task/);
  await page.getByRole('img', { name: /Result preview/ }).waitFor();
  const nav = page.getByRole('navigation', { name: 'Console' });
  assert.equal(await nav.isVisible(), false);
  await shot('19-task-390');
  const menu = page.getByRole('button', { name: 'Menu' });
  await menu.focus();
  await page.keyboard.press('Enter');
  assert.equal(await menu.getAttribute('aria-expanded'), 'true');
  await nav.getByRole('link', { name: 'Agents' }).waitFor();
  await shot('20-menu-390');
  await nav.getByRole('link', { name: 'Agents' }).click();
  await page.getByRole('heading', { level: 1, name: 'Agents' }).waitFor();
  assert.equal(await nav.isVisible(), false);
  // nothing overflows the narrow viewport but the tables' own scroll containers
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `page wider than the viewport by ${overflow}px`);
  await shot('21-agents-390');
  await go(`/workflows/${workflowId}`, 'Console fox');
  await shot('22-workflow-390');
  // sign out ends the session
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL(/\/login/);
});
