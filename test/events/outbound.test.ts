import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { waitForStatus } from '../helpers/tasks.js';
import { OutboundGuard, OutboundRefused, blockedReason, parseIp } from '../../src/events/outbound.js';
import { submitAs } from './helpers.js';

test('blockedReason: loopback, private, CGNAT, link-local/metadata, ULA, multicast, mapped and translated forms', () => {
  const blocked = [
    '127.0.0.1',
    '127.255.1.2',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '100.64.0.1',
    '169.254.169.254',
    '0.0.0.0',
    '0.1.2.3',
    '224.0.0.1',
    '255.255.255.255',
    '::1',
    '::',
    'fe80::1',
    'fc00::1',
    'fd12:3456::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:8.8.8.8',
    '64:ff9b::10.0.0.1',
    '2002:a00:1::1',
    '::127.0.0.1',
  ];
  for (const a of blocked) assert.ok(blockedReason(a), `${a} must be refused`);
  const allowed = ['8.8.8.8', '1.1.1.1', '172.32.0.1', '100.128.0.1', '2606:4700:4700::1111', '2a00:1450:4001::200e', '64:ff9b::8.8.8.8'];
  for (const a of allowed) assert.equal(blockedReason(a), null, `${a} must be allowed`);
  assert.equal(parseIp('::ffff:127.0.0.1')?.bits, parseIp('::ffff:7f00:1')?.bits);
});

test('OutboundGuard: every resolved address is checked; allowlist by host, IP or CIDR', async () => {
  const dns: Record<string, string[]> = { 'public.test': ['93.184.216.34'], 'rebind.test': ['93.184.216.34', '10.0.0.5'], 'meta.test': ['169.254.169.254'], 'lab.test': ['10.9.0.7'] };
  const resolver = async (h: string) => (dns[h] ?? []).map((address) => ({ address, family: address.includes(':') ? (6 as const) : (4 as const) }));
  const g = new OutboundGuard({ resolver });
  assert.equal((await g.checkUrl('https://public.test/x')).length, 1);
  for (const u of ['https://rebind.test/', 'https://meta.test/', 'https://169.254.169.254/latest/meta-data', 'https://[::ffff:127.0.0.1]/', 'https://[::1]/', 'https://2130706433/']) {
    await assert.rejects(g.checkUrl(u), (e: unknown) => e instanceof OutboundRefused && e.reason === 'blocked_address', u);
  }
  await assert.rejects(g.checkUrl('http://public.test/'), (e: unknown) => e instanceof OutboundRefused && e.reason === 'scheme');
  await assert.rejects(g.checkUrl('https://nowhere.test/'), (e: unknown) => e instanceof OutboundRefused && e.reason === 'unresolvable');
  const lab = new OutboundGuard({ resolver, allowlist: 'lab.test, 169.254.0.0/16, ::1' });
  assert.equal((await lab.checkUrl('https://lab.test/')).length, 1);
  assert.equal((await lab.checkUrl('https://meta.test/')).length, 1);
  assert.equal((await lab.checkUrl('https://[::1]:8443/')).length, 1);
  await assert.rejects(lab.checkUrl('https://rebind.test/'));
  // the connection-time lookup refuses too (the socket only ever gets checked addresses)
  const viaLookup = await new Promise<NodeJS.ErrnoException | null>((r) => g.lookup('meta.test', { all: true }, (err) => r(err)));
  assert.equal(viaLookup?.code, 'EOUTBOUNDREFUSED');
  const okLookup = await new Promise<unknown>((r) => g.lookup('public.test', {}, (_e, addr) => r(addr)));
  assert.equal(okLookup, '93.184.216.34');
});

let t: TestNode;
let owner: TestUser;
before(async () => {
  // an empty allowlist: what production does
  t = await startTestNode({ GANTRY_OUTBOUND_ALLOWLIST: '' }, 'outbound');
  owner = await registerUser(t.http);
});
after(async () => {
  await t.stop();
});

test('webhook URLs pointing at loopback, metadata or mapped loopback are refused (400 webhook_url_not_allowed) without an allowlist', async () => {
  const as = { token: owner.accessToken, team: owner.teamId };
  const base = { display_name: 'x', webhook_events: ['task.completed'] };
  for (const u of ['https://127.0.0.1/hook', 'https://localhost:8443/hook', 'https://169.254.169.254/latest/meta-data/', 'https://[::ffff:127.0.0.1]/hook', 'https://[::1]/hook', 'https://10.0.0.1/hook']) {
    const r = await t.http.post('/webhooks', { ...base, webhook_url: u }, as);
    assert.equal(r.status, 400, u);
    assert.equal(r.body.error_code, 'webhook_url_not_allowed', u);
    assert.match(r.body.error_message, /^webhook_url: /);
  }
  for (const [body, msg] of [
    [{ ...base, webhook_url: 'http://example.com/hook' }, /https/],
    [{ ...base, webhook_url: `https://example.com/${'a'.repeat(2049 - 'https://example.com/'.length)}` }, /webhook_url/],
    [{ ...base, webhook_url: 'https://example.com/hook', webhook_events: [] }, /webhook_events/],
  ] as const) {
    const r = await t.http.post('/webhooks', body, as);
    assert.equal(r.status, 400);
    assert.match(r.body.error_message, msg);
  }
});

test('the check is repeated at connection time: a stored webhook whose host now points at loopback is refused, not called', async () => {
  // a row that bypassed the create-time check (e.g. DNS changed since): the dispatcher must refuse it
  const id = '01930000-0000-7000-8000-0000000000aa';
  await t.node.db.execute(`insert into webhooks (id, team_id, display_name, webhook_url, webhook_events, signing_secret) values (?, ?, 'rebound', 'https://localhost:9/hook', '["task.completed"]', 'whsec_x')`, [id, owner.teamId]);
  const agent = await new FakeAgent(t.node, { teamId: owner.teamId }).connect();
  const taskId = await submitAs(t.node, owner.teamId, owner.userId);
  const a = await agent.assignment(taskId);
  agent.ack(a);
  await waitForStatus(t.node, taskId, 'running');
  agent.finish(a);
  await waitForStatus(t.node, taskId, 'completed');
  await t.node.liveEvents.feeder.scan();
  const deadline = Date.now() + 10_000;
  let row: Record<string, any> | undefined;
  while (Date.now() < deadline) {
    await t.node.liveEvents.dispatcher.idle();
    [row] = await t.node.db.execute<Record<string, any>>('select * from webhook_deliveries where webhook_id = ?', [id]);
    if (row && Number(row.attempt) >= 2) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(row);
  assert.match(String(row.last_error), /refused: localhost resolves to (127\.0\.0\.1|::1)/);
  assert.equal(row.response_code, null);
  await agent.disconnect();
});
