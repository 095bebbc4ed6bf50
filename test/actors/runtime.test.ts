import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LocalActorSystem, AskTimeoutError, type ActorContext } from '../../src/actors/runtime/system.js';
import { FakeClock } from '../../src/shared/clock.js';
import { conflict } from '../../src/shared/errors.js';

const quiet = { info() {}, warn() {}, error() {}, debug() {} };

/** A counter actor whose "persisted" state lives in a map (as PostgreSQL would hold it). */
function setup(clock = new FakeClock(0)) {
  const persisted = new Map<string, number>();
  const log: string[] = [];
  const sys = new LocalActorSystem(clock, { ...quiet, error: (o: object, m?: string) => log.push(`error ${m}`) });
  let activations = 0;
  let concurrent = 0;
  let maxConcurrent = 0;
  sys.register(
    'counter',
    (id: string, ctx: ActorContext) => {
      let n = 0;
      return {
        async onActivate() {
          activations++;
          n = persisted.get(id) ?? 0;
        },
        async receive(raw: unknown) {
          const m = raw as { op: string; ms?: number };
          concurrent++;
          maxConcurrent = Math.max(maxConcurrent, concurrent);
          try {
            await new Promise((r) => setImmediate(r));
            switch (m.op) {
              case 'inc':
                n++;
                persisted.set(id, n);
                return n;
              case 'get':
                return n;
              case 'crash':
                n = -999; // in-memory corruption that must not survive
                throw new TypeError('boom');
              case 'reject':
                throw conflict('nope', 'business rule');
              case 'timer':
                ctx.setTimer('t', m.ms ?? 10, { op: 'inc' });
                return 'armed';
              case 'stop':
                ctx.stop();
                return 'stopping';
              case 'hang':
                await new Promise(() => undefined);
                return null;
            }
            return null;
          } finally {
            concurrent--;
          }
        },
      };
    },
    { idleMs: 1000, parse: (m) => { if (typeof m !== 'object' || m === null || !('op' in m)) throw new Error('bad message'); return m; } },
  );
  return { sys, clock, persisted, log, stats: () => ({ activations, maxConcurrent }) };
}

test('virtual actors: activated on first message, one turn at a time, state per id', async () => {
  const { sys, stats } = setup();
  const a = { kind: 'counter', id: 'a' };
  const results = await Promise.all(Array.from({ length: 20 }, () => sys.ask<number>(a, { op: 'inc' })));
  assert.deepEqual(results, Array.from({ length: 20 }, (_, i) => i + 1), 'mailbox order, no lost update');
  assert.equal(stats().maxConcurrent, 1);
  assert.equal(await sys.ask({ kind: 'counter', id: 'b' }, { op: 'get' }), 0);
  assert.equal(stats().activations, 2);
});

test('a crash drops in-memory state and the actor re-activates from persisted state; business errors do not', async () => {
  const { sys, log, stats } = setup();
  const a = { kind: 'counter', id: 'c' };
  await sys.ask(a, { op: 'inc' });
  await sys.ask(a, { op: 'inc' });
  await assert.rejects(sys.ask(a, { op: 'crash' }), TypeError);
  assert.ok(log.some((l) => l.includes('crashed')));
  assert.equal(await sys.ask(a, { op: 'get' }), 2, 'restarted from persisted state, not the corrupted memory');
  assert.equal(stats().activations, 2);
  await assert.rejects(sys.ask(a, { op: 'reject' }), (e: any) => e.code === 'nope');
  assert.equal(stats().activations, 2, 'an application error is not a crash');
});

test('ask with a deadline rejects with AskTimeoutError; invalid messages are rejected by the protocol parser', async () => {
  const clock = new FakeClock(0);
  const { sys } = setup(clock);
  const p = sys.ask({ kind: 'counter', id: 'h' }, { op: 'hang' }, { deadlineMs: 500 });
  await new Promise((r) => setImmediate(r));
  clock.advance(600);
  await assert.rejects(p, AskTimeoutError);
  await assert.rejects(sys.ask({ kind: 'counter', id: 'x' }, 'not an object'), /bad message/);
  await assert.rejects(sys.ask({ kind: 'nobody', id: 'x' }, { op: 'get' }), /unknown actor kind/);
});

test('timers go through the clock; idle actors passivate, timers keep them alive; stop() passivates', async () => {
  const clock = new FakeClock(0);
  const { sys, stats } = setup(clock);
  const a = { kind: 'counter', id: 't' };
  assert.equal(await sys.ask(a, { op: 'timer', ms: 5000 }), 'armed');
  clock.advance(1500); // idle for longer than idleMs, but a timer is pending
  assert.ok(sys.isActive(a));
  clock.advance(4000); // the timer fires: inc
  assert.equal(await sys.ask(a, { op: 'get' }), 1);
  clock.advance(1100); // idle and no timers: passivated
  await new Promise((r) => setImmediate(r));
  assert.equal(sys.isActive(a), false);
  assert.equal(await sys.ask(a, { op: 'get' }), 1, 're-activated from persisted state');
  await sys.ask(a, { op: 'stop' });
  await new Promise((r) => setImmediate(r));
  assert.equal(sys.isActive(a), false);
  assert.equal(await sys.ask(a, { op: 'get' }), 1);
  assert.equal(stats().activations, 3);
});
