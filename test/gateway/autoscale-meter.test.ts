/**
 * The gateway's load meter (src/gateway/autoscale.ts), driven by hand (flush() is what its timer
 * calls): what each node reports to an autoscaled service's actor, and how held requests wait.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LoadMeter, type LoadReport } from '../../src/gateway/autoscale.js';

function meter() {
  let now = 1_000;
  const inflight = new Map<string, number>();
  const reports: Array<{ serviceId: string; r: LoadReport }> = [];
  const m = new LoadMeter({ intervalMs: 60_000, now: () => now, inflight: (id) => inflight.get(id) ?? 0, report: (serviceId, r) => reports.push({ serviceId, r }) });
  return { m, inflight, reports, advance: (ms: number) => (now += ms) };
}

test('a service is reported while it has requests in flight or held, once more at zero, then not at all', () => {
  const { m, inflight, reports, advance } = meter();
  try {
    m.started('svc', 'team', 'i1');
    m.started('svc', 'team', 'i2');
    inflight.set('i1', 1).set('i2', 1);
    m.flush();
    assert.deepEqual(reports.pop(), { serviceId: 'svc', r: { instances: [{ id: 'i1', inflight: 1 }, { id: 'i2', inflight: 1 }], queued: 0, queueDelayMs: 0, requests: 2 } });
    // a long request on i1 keeps it reported (requests started: none since)
    inflight.set('i2', 0);
    m.flush();
    assert.deepEqual(reports.pop()?.r, { instances: [{ id: 'i1', inflight: 1 }, { id: 'i2', inflight: 0 }], queued: 0, queueDelayMs: 0, requests: 0 });
    m.flush();
    assert.deepEqual(reports.pop()?.r.instances, [{ id: 'i1', inflight: 1 }], 'an instance reported at 0 is dropped');
    inflight.set('i1', 0);
    m.flush();
    assert.deepEqual(reports.pop()?.r, { instances: [{ id: 'i1', inflight: 0 }], queued: 0, queueDelayMs: 0, requests: 0 }, 'the zero is reported once');
    m.flush();
    assert.equal(reports.length, 0, 'then nothing');
    // held requests: counted as queued, their wait (so far, then final) is the queue delay
    const h = m.holdBegin('svc', 'team');
    advance(700);
    m.flush();
    assert.deepEqual(reports.pop()?.r, { instances: [], queued: 1, queueDelayMs: 700, requests: 0 });
    advance(300);
    m.holdEnd('svc', h);
    m.flush();
    assert.deepEqual(reports.pop()?.r, { instances: [], queued: 0, queueDelayMs: 1000, requests: 0 });
  } finally {
    m.close();
  }
});

test('a held request waits for a signal of its service or its team, or the recheck', async () => {
  const { m } = meter();
  try {
    m.holdBegin('svc', 'team');
    let woke = 0;
    const w1 = m.wait('svc', Number.MAX_SAFE_INTEGER).then(() => woke++);
    m.signal('svc');
    await w1;
    const w2 = m.wait('svc', Number.MAX_SAFE_INTEGER).then(() => woke++);
    m.signalTeam('other-team');
    m.signalTeam('team');
    await w2;
    // nothing signals: the recheck (250 ms) ends the wait
    await m.wait('svc', Number.MAX_SAFE_INTEGER);
    assert.equal(woke, 2);
  } finally {
    m.close();
  }
});
