import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeInvalidation, encodeInvalidation, type CacheInvalidationPort, type Invalidation } from '../../src/identity/invalidation.js';

/**
 * The contract every CacheInvalidationPort implementation passes (in memory now; a broadcast one
 * runs the same suite). `make` returns two ports that share one channel (for the in-memory one,
 * the same instance twice) and a cleanup.
 */
export function invalidationContract(name: string, make: () => Promise<{ a: CacheInvalidationPort; b: CacheInvalidationPort; close(): Promise<void> }>): void {
  const events: Invalidation[] = [
    { type: 'credential', ids: ['0195f0c2-7a4e-7000-8000-000000000001', '0195f0c2-7a4e-7000-8000-000000000002'] },
    { type: 'membership', teamId: '0195f0c2-7a4e-7000-8000-0000000000aa', userId: '0195f0c2-7a4e-7000-8000-0000000000bb' },
    { type: 'user', userId: '0195f0c2-7a4e-7000-8000-0000000000bb' },
    { type: 'team', teamId: '0195f0c2-7a4e-7000-8000-0000000000aa' },
    { type: 'session', ids: ['0195f0c2-7a4e-7000-8000-0000000000cc'] },
  ];

  test(`${name}: a publisher's own subscribers get each event before publish() returns`, async () => {
    const { a, close } = await make();
    try {
      const got: Invalidation[] = [];
      const off = a.subscribe((ev) => got.push(ev));
      for (const ev of events) {
        const before = got.length;
        const done = a.publish(ev);
        assert.equal(got.length, before + 1, `${ev.type} delivered synchronously`);
        await done;
        assert.deepEqual(got[got.length - 1], ev);
      }
      off();
      await a.publish(events[0]!);
      assert.equal(got.length, events.length, 'nothing after unsubscribe');
    } finally {
      await close();
    }
  });

  test(`${name}: every subscriber gets the event, even when one throws; the other side receives it`, async () => {
    const { a, b, close } = await make();
    try {
      const onA: Invalidation[] = [];
      const onB: Invalidation[] = [];
      const offBad = a.subscribe(() => {
        throw new Error('subscriber bug');
      });
      const offA = a.subscribe((ev) => onA.push(ev));
      let resolveB: () => void = () => undefined;
      const delivered = new Promise<void>((r) => (resolveB = r));
      const offB = b.subscribe((ev) => {
        onB.push(ev);
        resolveB();
      });
      const published = a.publish(events[1]!);
      assert.deepEqual(onA, [events[1]]);
      await published;
      await delivered;
      assert.deepEqual(onB, [events[1]]);
      offBad();
      offA();
      offB();
    } finally {
      await close();
    }
  });

  test(`${name}: events are plain JSON and malformed ones are refused`, async () => {
    const { a, close } = await make();
    try {
      for (const ev of events) assert.deepEqual(decodeInvalidation(encodeInvalidation(ev)), ev);
      assert.throws(() => decodeInvalidation('{"type":"credential","ids":[]}'));
      assert.throws(() => decodeInvalidation('{"type":"everything"}'));
      assert.throws(() => decodeInvalidation('{"type":"user","userId":"u","secret":"sk-x"}'), 'no extra fields');
      assert.throws(() => a.publish({ type: 'team' } as unknown as Invalidation));
    } finally {
      await close();
    }
  });
}
