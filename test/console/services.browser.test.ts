/**
 * The console creates and edits a container service (image, port, env, GPUs, replicas, autoscaling) through its
 * forms, and the API holds what was typed; the credentials page is not cut off at 390 px. Debian's
 * chromium through playwright-core, against a real node. Skips, naming chromium, where
 * /usr/bin/chromium is missing.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential, registerUser, type TestUser } from '../helpers/identity.js';
import { browserSkip, buildConsole, launchBrowser, newPage, signInWithTokens } from '../helpers/browser.js';

const skip = browserSkip();

let t: TestNode;
let user: TestUser;
let browser: Browser;
let page: Page;

before(async () => {
  if (skip) return;
  buildConsole();
  t = await startTestNode({}, 'console_services');
  user = await registerUser(t.http);
  browser = await launchBrowser();
  page = await newPage(browser);
  await signInWithTokens(page, t.origin, user);
});
after(async () => {
  if (skip) return;
  await browser?.close();
  await t?.stop();
});

interface Svc {
  id: string;
  service_slug: string;
  display_name: string;
  service_type: string;
  docker_image: string;
  exposed_port: number;
  health_path: string;
  env_config: Array<{ env_name: string; env_value: string }>;
  gpu_count: number;
  replica_count: number;
  required_labels: string[];
  min_replicas: number | null;
  max_replicas: number | null;
  target_inflight_per_replica: number | null;
  idle_timeout_s: number | null;
}

test('create a container service in the console, then edit it: the API holds what was typed', { skip, timeout: 120_000 }, async () => {
  await page.goto(`${t.origin}/services`);
  await page.getByRole('heading', { name: 'New container service' }).click();
  // (the form is folded until asked for)
  await page.getByLabel('Name', { exact: true }).fill('LLM server');
  await page.getByLabel('Slug').fill('llm-server');
  await page.getByLabel('Docker image').fill('ghcr.io/example/llm:1.0');
  await page.getByLabel('Port').fill('8000');
  await page.getByLabel('Health check path').fill('/health');
  await page.getByLabel('Environment').fill('MODEL=llama-3-8b\nTOKEN=a=b=c\n');
  await page.getByLabel('GPUs per replica').fill('1');
  await page.getByLabel('Replicas', { exact: true }).fill('2');
  await page.getByLabel('Required agent labels').fill('gpu, eu');
  await page.getByRole('button', { name: 'Create service' }).click();
  await page.waitForURL(/\/services\/[0-9a-f-]{36}$/);
  const id = page.url().split('/').pop()!;
  await page.getByRole('heading', { name: /LLM server/, level: 1 }).waitFor();

  const created = (await t.http.get(`/containers/${id}`, { token: user.accessToken, team: user.teamId })).body as Svc;
  assert.deepEqual(
    { slug: created.service_slug, name: created.display_name, type: created.service_type, image: created.docker_image, port: created.exposed_port, health: created.health_path, env: created.env_config, gpus: created.gpu_count, replicas: created.replica_count, labels: created.required_labels },
    { slug: 'llm-server', name: 'LLM server', type: 'deployed', image: 'ghcr.io/example/llm:1.0', port: 8000, health: '/health', env: [{ env_name: 'MODEL', env_value: 'llama-3-8b' }, { env_name: 'TOKEN', env_value: 'a=b=c' }], gpus: 1, replicas: 2, labels: ['gpu', 'eu'] },
  );

  // the edit form starts from the stored settings
  await page.getByRole('heading', { name: 'Edit settings' }).click();
  assert.equal(await page.getByLabel('Docker image').inputValue(), 'ghcr.io/example/llm:1.0');
  assert.equal(await page.getByLabel('Environment').inputValue(), 'MODEL=llama-3-8b\nTOKEN=a=b=c');
  await page.getByLabel('Docker image').fill('ghcr.io/example/llm:1.1');
  await page.getByLabel('Port').fill('9000');
  await page.getByLabel('Environment').fill('MODEL=llama-3-70b');
  await page.getByLabel('GPUs per replica').fill('-1');
  await page.getByLabel('Replicas', { exact: true }).fill('3');
  await page.getByRole('button', { name: 'Save changes' }).click();
  await page.getByText('Saved.').waitFor();
  const edited = (await t.http.get(`/containers/${id}`, { token: user.accessToken, team: user.teamId })).body as Svc;
  assert.deepEqual(
    { image: edited.docker_image, port: edited.exposed_port, env: edited.env_config, gpus: edited.gpu_count, replicas: edited.replica_count, slug: edited.service_slug, labels: edited.required_labels },
    { image: 'ghcr.io/example/llm:1.1', port: 9000, env: [{ env_name: 'MODEL', env_value: 'llama-3-70b' }], gpus: -1, replicas: 3, slug: 'llm-server', labels: ['gpu', 'eu'] },
  );
  // the page shows the saved settings
  await page.getByText('ghcr.io/example/llm:1.1', { exact: true }).first().waitFor();

  // autoscaling: Max replicas turns it on (Min 0 = scale to zero), the page shows the range; clearing it turns it off
  await page.getByLabel('Max replicas (autoscaling)').fill('4');
  await page.getByLabel('Min replicas').fill('0');
  await page.getByLabel('Idle timeout (s)').fill('120');
  await page.getByRole('button', { name: 'Save changes' }).click();
  await page.getByText('autoscaling 0–4').waitFor();
  const scaled = (await t.http.get(`/containers/${id}`, { token: user.accessToken, team: user.teamId })).body as Svc;
  assert.deepEqual(
    { min: scaled.min_replicas, max: scaled.max_replicas, target: scaled.target_inflight_per_replica, idle: scaled.idle_timeout_s },
    { min: 0, max: 4, target: 8, idle: 120 }, // an empty target: the default (8)
  );
  await page.getByLabel('Max replicas (autoscaling)').fill('');
  await page.getByRole('button', { name: 'Save changes' }).click();
  await page.getByText(/^-?\d+ \/ 3$/).waitFor();
  const fixed = (await t.http.get(`/containers/${id}`, { token: user.accessToken, team: user.teamId })).body as Svc;
  assert.equal(fixed.max_replicas, null);
  assert.equal(fixed.replica_count, 3);

  // a refusal of the API is shown in the form, and nothing changes
  await page.getByLabel('Environment').fill('1BAD=x');
  await page.getByRole('button', { name: 'Save changes' }).click();
  await page.getByRole('alert').filter({ hasText: /env_config/ }).waitFor();
  const after = (await t.http.get(`/containers/${id}`, { token: user.accessToken, team: user.teamId })).body as Svc;
  assert.deepEqual(after.env_config, [{ env_name: 'MODEL', env_value: 'llama-3-70b' }]);
});

test('390 px wide: the credentials page is not cut off horizontally', { skip, timeout: 60_000 }, async () => {
  await createCredential(t.http, user, 'integration');
  await createCredential(t.http, user, 'agent');
  await page.setViewportSize({ width: 390, height: 800 });
  try {
    await page.goto(`${t.origin}/credentials`);
    await page.getByRole('heading', { level: 1 }).first().waitFor();
    await page.locator('table tbody tr').nth(1).waitFor();
    const m = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
    // what sticks out (outside the tables' own horizontal scroll boxes)
    const widest = await page.evaluate(() => Array.from(document.querySelectorAll('body *')).filter((e) => e.getBoundingClientRect().right > 392 && !e.parentElement?.closest('.scroll')).map((e) => `${e.tagName}#${e.id}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`).slice(0, 8).join(', '));
    assert.ok(m.scroll <= m.client, `/credentials is ${m.scroll} px wide in a ${m.client} px viewport (${widest})`);
  } finally {
    await page.setViewportSize({ width: 1280, height: 800 });
  }
});
