/**
 * @gantry/sdk against a real node (real PostgreSQL, HTTP on loopback) and a real agent process
 * (`gantry agent --executor simulate`): register and log in, create a workflow, stage an input file
 * through presign, runAndWait with events, resume the event stream with Last-Event-ID, download the
 * PNG result; a 400 surfaces as a GantryError carrying error_code; webhook signatures verify.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, randomUUID } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createClient, GantryError, verifyWebhookSignature, type TaskEvent } from '@gantry/sdk';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { validatorFor } from '../helpers/openapi-validate.js';
import { spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess } from '../agents/helpers.js';

const PNG_SIG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

let t: TestNode;
let agent: AgentProcess | null = null;
before(async () => {
  t = await startTestNode({}, 'clients_sdk');
});
after(async () => {
  agent?.kill('SIGKILL');
  await agent?.exited;
  await t.stop();
});

test('SDK: register, login, workflow, upload, runAndWait with a simulated agent, events with resume, download, typed errors', { timeout: 90_000 }, async () => {
  const anon = createClient({ baseUrl: t.baseUrl });
  const email = `sdk-${randomUUID()}@example.com`;
  await anon.register({ email_address: email, password: 'correct horse battery', first_name: 'Sdk', last_name: 'User' });

  const gantry = createClient({ baseUrl: t.baseUrl });
  const tokens = await gantry.login(email, 'correct horse battery');
  assert.equal(tokens.token_type, 'Bearer');
  const me = await gantry.me();
  assert.equal(me.email_address, email);
  const teamId = me.team_list[0]!.id;
  gantry.setTeam(teamId);

  // a 400 is a typed error with the error envelope's code
  await assert.rejects(
    gantry.api.POST('/workflows', { body: { workflow_slug: 'Not A Slug', display_name: 'x', workflow_json: {} } }),
    (e: unknown) => e instanceof GantryError && e.status === 400 && e.error_code === 'invalid_parameter' && /workflow_slug/.test(e.error_message),
  );
  // 404 too
  await assert.rejects(gantry.getTask(randomUUID()), (e: unknown) => e instanceof GantryError && e.status === 404 && e.error_code === 'task_not_found');

  const slug = `sdk-${randomUUID().slice(0, 8)}`;
  const { data: created } = await gantry.api.POST('/workflows', {
    body: {
      workflow_slug: slug,
      display_name: 'SDK test',
      workflow_json: tinyGraph(),
      parameters: [
        { key: 'prompt', node_id: '6', field: 'text' },
        { key: 'init_image', type: 'file', node_id: '4', field: 'ckpt_name', required: false },
      ],
    },
  });
  assert.ok(created?.id);
  const wf = await gantry.getWorkflow(slug);
  assert.equal(wf.id, created.id);
  assert.equal(wf.version, 1);

  // an agent process on the team's ak-
  const { data: ak } = await gantry.api.POST('/credentials', { body: { credential_type: 'agent', display_name: 'sdk agent' } });
  agent = spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', ak!.credential_value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-sdk-agent-'), '--simulate-duration-ms', '300', '--simulate-steps', '4']);
  await waitFor('an online agent', async () => ((await gantry.api.GET('/r/agents')).data!.agent_list.find((a) => a.agent_status !== 'offline') ?? null), 30_000);

  // staging an input file through presign
  const fileKey = await gantry.uploadFile(new TextEncoder().encode('fake image bytes'), { fileName: 'in.png', contentType: 'image/png' });
  assert.match(fileKey, /\S/);

  const events: TaskEvent[] = [];
  const { task_id, task, result } = await gantry.runAndWait(slug, { prompt: 'a red fox', init_image: fileKey }, { onEvent: (e) => events.push(e) });
  assert.equal(task.task_status, 'completed');
  assert.ok(events.some((e) => e.type === 'progress'), `progress events: ${JSON.stringify(events)}`);
  const last = events.at(-1)!;
  assert.equal(last.type, 'completed');
  if (last.type === 'completed') assert.equal(last.data.task_id, task_id);
  for (const e of events) assert.match(e.id ?? '', /^\d+$/, 'every message has an id');
  // every event's data matches its documented schema (the document's x-sse-events components)
  const v = await validatorFor(t.baseUrl);
  const component: Record<string, string> = { status: 'TaskEventStatus', progress: 'TaskEventProgress', completed: 'TaskEventCompleted', failed: 'TaskEventFailed', cancelled: 'TaskEventCancelled', error: 'TaskEventError' };
  for (const e of events) assert.equal(v!.checkComponent(component[e.type]!, e.data), null);

  // resume: after the first event, the stream replays the rest (same ids) and ends at the terminal one
  const first = events[0]!;
  const resumed: TaskEvent[] = [];
  for await (const e of gantry.events(task_id, { lastEventId: first.id! })) resumed.push(e);
  assert.ok(resumed.length >= 1);
  assert.ok(resumed.every((e) => Number(e.id) > Number(first.id)), `resumed ids ${resumed.map((e) => e.id).join(',')} after ${first.id}`);
  assert.equal(resumed.at(-1)!.type, 'completed');

  // the result downloads (a PNG from the simulate executor)
  assert.ok(result.download_url);
  const png = Buffer.from(await (await gantry.download(result.download_url)).arrayBuffer());
  assert.ok(png.subarray(0, 8).equals(PNG_SIG), 'the download is a PNG');

  // a run with an unknown parameter is a 400 with its code
  await assert.rejects(gantry.run(slug, { nope: 1 }), (e: unknown) => e instanceof GantryError && e.status === 400 && typeof e.error_code === 'string' && e.error_code.length > 0);

  // sk- credentials work the same way
  const { data: sk } = await gantry.api.POST('/credentials', { body: { credential_type: 'integration', display_name: 'sdk sk' } });
  const integration = createClient({ baseUrl: t.baseUrl, token: sk!.credential_value });
  const viaSk = await integration.getTask(task_id);
  assert.equal(viaSk.task_status, 'completed');
});

test('SDK: webhook signature verification (WebCrypto HMAC-SHA256, sha256=<hex>)', async () => {
  const secret = 'whsec-test';
  const body = JSON.stringify({ event_type: 'task.completed', task_id: randomUUID() });
  const sig = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
  assert.equal(await verifyWebhookSignature(secret, body, sig), true);
  assert.equal(await verifyWebhookSignature(secret, new TextEncoder().encode(body), sig), true);
  assert.equal(await verifyWebhookSignature('other', body, sig), false);
  assert.equal(await verifyWebhookSignature(secret, `${body} `, sig), false);
  assert.equal(await verifyWebhookSignature(secret, body, null), false);
  assert.equal(await verifyWebhookSignature(secret, body, 'sha256=zz'), false);
});

test('SDK main entry imports nothing Node-only (it runs in browsers)', () => {
  const dir = join(new URL('../../packages/sdk/src', import.meta.url).pathname);
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.ts'))) {
    const src = readFileSync(join(dir, f), 'utf8');
    const imports = [...src.matchAll(/^\s*(?:import|export)[^'"]*from\s+['"]([^'"]+)['"]/gm)].map((m) => m[1]!);
    for (const i of imports) assert.ok(!i.startsWith('node:') && !['fs', 'path', 'crypto', 'http', 'https', 'stream', 'buffer', 'os', 'child_process'].includes(i), `${f} imports ${i}`);
    assert.doesNotMatch(src, /\bBuffer\.|\bprocess\.|\brequire\(/, `${f} uses a Node global`);
  }
});
