/** Pure parts of the gateway and the container-service actor: the balancer, placement, the service state. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Balancer } from '../../src/gateway/balancer.js';
import { affinityOf, pinCookie, type Affinity } from '../../src/gateway/affinity.js';
import { place, runningStatus, detailOf, settleRun } from '../../src/actors/container/decide.js';
import type { ServiceInstance } from '../../src/domain/containers/schema.js';
import { CreateServiceBody, OPERATION_FROM, serviceJson } from '../../src/domain/containers/schema.js';

const inst = (id: string, agentId: string, over: Partial<ServiceInstance> = {}): ServiceInstance => ({ id, agentId, status: 'running', healthy: true, error: '', updatedAt: 0, ...over });

test('balancer: least outstanding, round robin on ties, cap per instance, ejection after a failure', () => {
  let now = 1000;
  const b = new Balancer({ maxInflight: 2, ejectMs: 100, now: () => now });
  const all = [inst('i1', 'a1'), inst('i2', 'a2')];
  const online = () => true;
  const seen: string[] = [];
  for (let k = 0; k < 4; k++) {
    const p = b.pick('s', all, online);
    assert.ok(p.ok);
    seen.push(p.instance.id);
    p.release(false);
  }
  assert.deepEqual(seen, ['i1', 'i2', 'i1', 'i2'], 'round robin among equally loaded instances');
  // least outstanding: i1 busy -> i2
  const p1 = b.pick('s', all, online);
  assert.ok(p1.ok);
  const p2 = b.pick('s', all, online);
  assert.ok(p2.ok && p2.instance.id !== p1.instance.id);
  const p3 = b.pick('s', all, online);
  const p4 = b.pick('s', all, online);
  assert.ok(p3.ok && p4.ok);
  const p5 = b.pick('s', all, online);
  assert.deepEqual(p5, { ok: false, reason: 'instances_busy' }, 'at the cap on every instance');
  for (const p of [p1, p2, p3, p4]) if (p.ok) p.release(false);
  // a failure ejects the instance; it comes back when the ejection lapses
  const f = b.pick('s', all, online);
  assert.ok(f.ok);
  f.release(true);
  assert.ok(b.ejected(f.instance.id));
  for (let k = 0; k < 3; k++) {
    const p = b.pick('s', all, online);
    assert.ok(p.ok && p.instance.id !== f.instance.id);
    p.release(false);
  }
  now += 101;
  assert.ok(!b.ejected(f.instance.id));
  // unhealthy, not running, or agent offline: not picked; none left -> the reason
  assert.deepEqual(b.pick('s', [inst('x', 'a', { healthy: false }), inst('y', 'a', { status: 'starting' })], online), { ok: false, reason: 'no_healthy_instance' });
  assert.deepEqual(b.pick('s', all, () => false), { ok: false, reason: 'no_online_agent' });
  // every reachable instance ejected: still tried (better than a certain 503)
  const only = [inst('z', 'a3')];
  const z = b.pick('t', only, online);
  assert.ok(z.ok);
  z.release(true);
  assert.ok(b.pick('t', only, online).ok);
});

test('placement: labels, runtime, spread over agents, free GPUs, -1 = all GPUs of an agent', () => {
  const agents = [
    { id: 'a', labels: ['gpu', 'eu'], gpuCount: 2, runtime: 'docker' },
    { id: 'b', labels: ['gpu'], gpuCount: 1, runtime: 'docker' },
    { id: 'c', labels: ['gpu', 'eu'], gpuCount: 4, runtime: '' },
  ];
  assert.deepEqual(place({ requiredLabels: [], gpuCount: 0 }, 2, agents, new Map(), new Map()).chosen.sort(), ['a', 'b'], 'two replicas on two agents; c has no runtime');
  assert.deepEqual(place({ requiredLabels: ['eu'], gpuCount: 0 }, 1, agents, new Map(), new Map()).chosen, ['a']);
  assert.deepEqual(place({ requiredLabels: ['eu'], gpuCount: 0 }, 3, agents, new Map(), new Map()).chosen, ['a', 'a', 'a'], 'without GPUs, replicas may share the only eligible agent');
  assert.deepEqual(place({ requiredLabels: [], gpuCount: 2 }, 2, agents, new Map(), new Map()).chosen, ['a'], 'only a has 2 GPUs');
  assert.match(place({ requiredLabels: [], gpuCount: 2 }, 2, agents, new Map(), new Map()).reason, /GPU/);
  assert.deepEqual(place({ requiredLabels: [], gpuCount: 1 }, 1, agents, new Map(), new Map([['a', 2]])).chosen, ['b'], 'a\'s GPUs are held by another service');
  assert.deepEqual(place({ requiredLabels: [], gpuCount: -1 }, 2, agents, new Map(), new Map()).chosen.sort(), ['a', 'b'], '-1 takes every GPU of an agent');
  assert.deepEqual(place({ requiredLabels: [], gpuCount: -1 }, 1, agents, new Map(), new Map([['a', 1], ['b', 1]])).chosen, [], 'an agent with a GPU in use cannot give all of them');
  const none = place({ requiredLabels: ['us'], gpuCount: 0 }, 1, agents, new Map(), new Map());
  assert.deepEqual(none.chosen, []);
  assert.match(none.reason, /required labels/);
  assert.match(place({ requiredLabels: [], gpuCount: 0 }, 1, [], new Map(), new Map()).reason, /no online agent/);
  assert.deepEqual(place({ requiredLabels: [], gpuCount: 0 }, 1, agents, new Map([['a', 1]]), new Map()).chosen, ['b'], 'spread: the agent without a replica first');
});

test('service state: running once a replica is healthy; deploying fails when nothing is live', () => {
  assert.equal(runningStatus('deploying', [inst('1', 'a', { healthy: false, status: 'starting' })], false), 'deploying');
  assert.equal(runningStatus('deploying', [inst('1', 'a')], false), 'running');
  assert.equal(runningStatus('deploying', [], true), 'failed');
  assert.equal(runningStatus('deploying', [inst('1', 'a', { status: 'failed', healthy: false })], false), 'failed');
  assert.equal(runningStatus('running', [inst('1', 'a', { status: 'failed', healthy: false })], false), 'running', 'a running service stays running while it re-places');
  assert.deepEqual(detailOf([inst('1', 'a'), inst('2', 'b', { healthy: false }), inst('3', 'c', { status: 'pending', healthy: false })], 'm'), { placed: 3, running: 2, healthy: 1, message: 'm' });
  assert.deepEqual(OPERATION_FROM.delete, ['created', 'stopped', 'failed']);
});

test('failed replicas: a deploying service whose placed replicas all failed ends failed and keeps them; otherwise they are replaced', () => {
  const failed = (id: string) => inst(id, 'a', { status: 'failed', healthy: false, error: 'image x is not on this host and could not be pulled: ...' });
  // the image-not-found fault: the failed replica was dropped before the status was decided, so the service re-placed forever
  assert.deepEqual(settleRun('deploying', [failed('1')], false), { status: 'failed', replace: [] });
  assert.deepEqual(settleRun('deploying', [failed('1'), failed('2')], false), { status: 'failed', replace: [] });
  assert.deepEqual(settleRun('deploying', [failed('1'), inst('2', 'b', { status: 'starting', healthy: false })], false), { status: 'deploying', replace: ['1'] }, 'another replica is still live');
  assert.deepEqual(settleRun('running', [failed('1')], false), { status: 'running', replace: ['1'] }, 'a running service replaces (with backoff) and stays running');
  assert.deepEqual(settleRun('deploying', [failed('1'), inst('2', 'b')], false), { status: 'running', replace: ['1'] });
});

test('definition: type rules and the reduced view for sk- callers', () => {
  assert.equal(CreateServiceBody.safeParse({ service_slug: 'a', display_name: 'A', docker_image: 'img', exposed_port: 80 }).success, true);
  assert.equal(CreateServiceBody.safeParse({ service_slug: 'a', display_name: 'A', service_type: 'external', external_url: 'https://api.example.com/v1' }).success, true);
  assert.equal(CreateServiceBody.safeParse({ service_slug: 'a', display_name: 'A', service_type: 'external', external_url: 'https://u:p@api.example.com/' }).success, false, 'no credentials in the URL');
  assert.equal(CreateServiceBody.safeParse({ service_slug: 'a', display_name: 'A', docker_image: 'img', exposed_port: 80, external_url: 'https://x.example' }).success, false);
  assert.equal(CreateServiceBody.safeParse({ service_slug: 'a', display_name: 'A', docker_image: 'img', exposed_port: 80, env_config: [{ env_name: 'A', env_value: '1' }, { env_name: 'A', env_value: '2' }] }).success, false);
  const rec = {
    id: 'id', teamId: 't', slug: 's', displayName: 'S', type: 'deployed' as const, status: 'running' as const, desc: '', image: 'img', exposedPort: 80, healthPath: '/h',
    env: [{ env_name: 'TOKEN', env_value: 'secret' }], volumes: [{ host_path: '/srv/data', container_path: '/data' }], requiredLabels: [], gpuCount: 0, replicaCount: 1,
    usagePrompt: '', openapiUrl: '', externalUrl: '', externalAuthCredentialId: null, sessionAffinity: null, minReplicas: null, maxReplicas: null, targetInflight: null, idleTimeoutS: null, detail: {}, createdAt: 0, updatedAt: 0,
  };
  const reduced = JSON.stringify(serviceJson(rec, true));
  assert.ok(!reduced.includes('secret') && !reduced.includes('/srv/data'));
  assert.ok(JSON.stringify(serviceJson(rec, false)).includes('secret'));
});

test('session affinity: rendezvous is the same on every balancer (node) and moves only the lost instance\'s keys; a pinned instance is kept while usable', () => {
  const inst = (id: string, over: Partial<ServiceInstance> = {}): ServiceInstance => ({ id, agentId: `agent-${id}`, status: 'running', healthy: true, error: '', updatedAt: 0, ...over });
  const three = [inst('i-a'), inst('i-b'), inst('i-c')];
  const nodeA = new Balancer({ maxInflight: 100, ejectMs: 1000, now: () => 0 });
  const nodeB = new Balancer({ maxInflight: 100, ejectMs: 1000, now: () => 0 });
  const pickOf = (b: Balancer, list: ServiceInstance[], a: Affinity | null) => {
    const p = b.pick('svc', list, () => true, undefined, a);
    assert.ok(p.ok);
    p.release(false);
    return p.instance.id;
  };
  const keys = Array.from({ length: 300 }, (_, i) => `session-${i}`);
  const before = new Map(keys.map((k) => [k, pickOf(nodeA, three, { kind: 'key', key: k })]));
  for (const k of keys) assert.equal(pickOf(nodeB, [...three].reverse(), { kind: 'key', key: k }), before.get(k), 'same choice on another node, whatever the order');
  const spread = new Map<string, number>();
  for (const v of before.values()) spread.set(v, (spread.get(v) ?? 0) + 1);
  for (const n of spread.values()) assert.ok(n > 60, `spread: ${JSON.stringify([...spread])}`);
  // i-b goes unhealthy: only its keys move
  const without = [three[0] as ServiceInstance, inst('i-b', { healthy: false }), three[2] as ServiceInstance];
  for (const k of keys) {
    const now = pickOf(nodeA, without, { kind: 'key', key: k });
    if (before.get(k) !== 'i-b') assert.equal(now, before.get(k), `${k} did not move`);
    else assert.notEqual(now, 'i-b');
  }
  // pinned: kept; unknown or unhealthy: balanced as usual
  for (let i = 0; i < 5; i++) assert.equal(pickOf(nodeA, three, { kind: 'instance', instanceId: 'i-c' }), 'i-c');
  assert.notEqual(pickOf(nodeA, [three[0] as ServiceInstance, three[1] as ServiceInstance, inst('i-c', { healthy: false })], { kind: 'instance', instanceId: 'i-c' }), 'i-c');
  // at its cap, a pinned instance is not waited for
  const capped = new Balancer({ maxInflight: 1, ejectMs: 1000, now: () => 0 });
  const held = capped.pick('svc', three, () => true, undefined, { kind: 'instance', instanceId: 'i-a' });
  assert.ok(held.ok && held.instance.id === 'i-a');
  const next = capped.pick('svc', three, () => true, undefined, { kind: 'instance', instanceId: 'i-a' });
  assert.ok(next.ok && next.instance.id !== 'i-a');
});

test('session affinity: the request\'s key (header or cookie), the pinning cookie, and the definition rules', () => {
  const hs: Array<[string, string]> = [['Cookie', 'a=1; gantry_affinity_web=i-9 ; b=2'], ['X-Session-ID', 'abc']];
  assert.deepEqual(affinityOf({ mode: 'header', header_name: 'x-session-id' }, 'web', hs), { kind: 'key', key: 'abc' });
  assert.deepEqual(affinityOf({ mode: 'cookie' }, 'web', hs), { kind: 'instance', instanceId: 'i-9' });
  assert.equal(affinityOf({ mode: 'cookie' }, 'other', hs), null);
  assert.equal(affinityOf(null, 'web', hs), null);
  assert.equal(pinCookie({ mode: 'cookie' }, 'web', { kind: 'instance', instanceId: 'i-9' }, 'i-9'), null);
  assert.equal(pinCookie({ mode: 'cookie' }, 'web', null, 'i-1'), 'gantry_affinity_web=i-1; Path=/; HttpOnly; SameSite=Lax');
  assert.equal(pinCookie({ mode: 'header', header_name: 'x' }, 'web', null, 'i-1'), null);
  const base = { service_slug: 'web', display_name: 'w', docker_image: 'img:1', exposed_port: 80 };
  assert.ok(CreateServiceBody.safeParse({ ...base, session_affinity: { mode: 'cookie' } }).success);
  assert.equal(CreateServiceBody.parse(base).session_affinity, null, 'default: none');
  assert.ok(!CreateServiceBody.safeParse({ ...base, session_affinity: { mode: 'header' } }).success, 'header mode needs header_name');
  assert.ok(!CreateServiceBody.safeParse({ ...base, session_affinity: { mode: 'ip' } }).success);
  assert.ok(!CreateServiceBody.safeParse({ service_slug: 'x', display_name: 'x', service_type: 'external', external_url: 'https://example.com', session_affinity: { mode: 'cookie' } }).success, 'external services have no instances');
});
