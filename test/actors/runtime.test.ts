import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LocalActorSystem, AskTimeoutError, type ActorContext } from '../../src/actors/runtime/system.js';
import { FakeClock } from '../../src/shared/clock.js';
import { conflict } from '../../src/shared/errors.js';

const quiet = { info() {}, warn() {}, error() {}, debug() {} };

type CounterMsg =
  | { type: 'inc' }
  | { type: 'get' }
  | { type: 'crash' }
  | { type: 'reject' }
  | { type: 'timer'; ms: number }
  | { type: 'stop' }
  | { type: 'hang' }
  /** persists n+1 through slow "I/O" (a promise the test settles), answered after the write */
  | { type: 'save' }
  /** stop while a save is in flight */
  | { type: 'save_then_stop' };

interface TestProtocols {
  counter: {
    msg: CounterMsg;
    replies: { inc: number; get: number; crash: number; reject: number; timer: string; stop: string; hang: number; save: number; save_then_stop: string };
  };
}

/** A counter actor whose "persisted" state lives in a map (as PostgreSQL would hold it). */
function setup(clock = new FakeClock(0)) {
  const persisted = new Map<string, number>();
  const log: string[] = [];
  /** the pending "writes": the test resolves or rejects them */
  const writes: Array<{ resolve: () => void; reject: (e: unknown) => void }> = [];
  const sys = new LocalActorSystem<TestProtocols>(clock, { ...quiet, error: (_o: object, m?: string) => log.push(`error ${m}`) });
  let activations = 0;
  let passivations = 0;
  const order: string[] = [];
  sys.register(
    'counter',
    (id: string, ctx: ActorContext<TestProtocols, 'counter'>) => {
      let n = 0;
      let busy = false;
      const write = (value: number): Promise<void> =>
        new Promise<void>((resolve, reject) => writes.push({ resolve: () => (persisted.set(id, value), resolve()), reject }));
      return {
        async onActivate() {
          activations++;
          n = persisted.get(id) ?? 0;
        },
        async onPassivate() {
          passivations++;
        },
        receive(m) {
          if (busy) {
            ctx.stash();
            return undefined;
          }
          order.push(m.type);
          switch (m.type) {
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
              ctx.setTimer('t', m.ms, { type: 'inc' });
              return 'armed';
            case 'stop':
              ctx.stop();
              return 'stopping';
            case 'hang':
              ctx.deferReply();
              return undefined;
            case 'save':
            case 'save_then_stop': {
              const reply = ctx.deferReply();
              busy = true;
              ctx.reenterAfter(write(n + 1), (r) => {
                busy = false;
                ctx.unstashAll();
                if (!r.ok) {
                  reply.reject(r.error);
                  throw r.error;
                }
                n++;
                reply.resolve(m.type === 'save' ? n : 'saved');
              });
              if (m.type === 'save_then_stop') ctx.stop();
              return undefined;
            }
          }
        },
      };
    },
    {
      idleMs: 1000,
      parse: (m) => {
        if (typeof m !== 'object' || m === null || !('type' in m)) throw new Error('bad message');
        return m;
      },
    },
  );
  return { sys, clock, persisted, log, writes, order, stats: () => ({ activations, passivations }) };
}

const turns = () => new Promise((r) => setImmediate(r));

test('virtual actors: activated on first message, one turn at a time, state per id', async () => {
  const { sys, stats } = setup();
  const a = { kind: 'counter', id: 'a' } as const;
  const results = await Promise.all(Array.from({ length: 20 }, () => sys.ask(a, { type: 'inc' })));
  assert.deepEqual(results, Array.from({ length: 20 }, (_, i) => i + 1), 'mailbox order, no lost update');
  assert.equal(await sys.ask({ kind: 'counter', id: 'b' }, { type: 'get' }), 0);
  assert.equal(stats().activations, 2);
});

test('a crash drops in-memory state and the actor re-activates from persisted state; business errors do not', async () => {
  const { sys, log, stats } = setup();
  const a = { kind: 'counter', id: 'c' } as const;
  await sys.ask(a, { type: 'inc' });
  await sys.ask(a, { type: 'inc' });
  await assert.rejects(sys.ask(a, { type: 'crash' }), TypeError);
  assert.ok(log.some((l) => l.includes('crashed')));
  assert.equal(await sys.ask(a, { type: 'get' }), 2, 'restarted from persisted state, not the corrupted memory');
  assert.equal(stats().activations, 2);
  await assert.rejects(sys.ask(a, { type: 'reject' }), (e: any) => e.code === 'nope');
  assert.equal(stats().activations, 2, 'an application error is not a crash');
});

test('ask with a deadline rejects with AskTimeoutError; invalid messages are rejected by the protocol parser', async () => {
  const clock = new FakeClock(0);
  const { sys } = setup(clock);
  const p = sys.ask({ kind: 'counter', id: 'h' }, { type: 'hang' }, { deadlineMs: 500 });
  await turns();
  clock.advance(600);
  await assert.rejects(p, AskTimeoutError);
  await assert.rejects(sys.ask({ kind: 'counter', id: 'x' }, 'not an object' as never), /bad message/);
  await assert.rejects(sys.ask({ kind: 'nobody' as 'counter', id: 'x' }, { type: 'get' }), /unknown actor kind/);
});

test('timers go through the clock; idle actors passivate, timers keep them alive; stop() passivates', async () => {
  const clock = new FakeClock(0);
  const { sys, stats } = setup(clock);
  const a = { kind: 'counter', id: 't' } as const;
  assert.equal(await sys.ask(a, { type: 'timer', ms: 5000 }), 'armed');
  clock.advance(1500); // idle for longer than idleMs, but a timer is pending
  assert.ok(sys.isActive(a));
  clock.advance(4000); // the timer fires: inc
  assert.equal(await sys.ask(a, { type: 'get' }), 1);
  clock.advance(1100); // idle and no timers: passivated
  await turns();
  assert.equal(sys.isActive(a), false);
  assert.equal(await sys.ask(a, { type: 'get' }), 1, 're-activated from persisted state');
  await sys.ask(a, { type: 'stop' });
  await turns();
  assert.equal(sys.isActive(a), false);
  assert.equal(await sys.ask(a, { type: 'get' }), 1);
  assert.equal(stats().activations, 3);
});

test('reenterAfter: a turn starts I/O and returns; stashed messages replay in order after the continuation; deferred replies answer after the write', async () => {
  const clock = new FakeClock(0);
  const { sys, writes, persisted, order } = setup(clock);
  const a = { kind: 'counter', id: 's' } as const;
  const saved = sys.ask(a, { type: 'save' });
  const got = sys.ask(a, { type: 'get' });
  const inc = sys.ask(a, { type: 'inc' });
  await turns();
  assert.equal(writes.length, 1, 'the write started');
  assert.deepEqual(order, ['save'], 'the messages behind it are stashed, not processed');
  assert.equal(persisted.get('s'), undefined);
  clock.advance(5000); // pending I/O keeps the actor active past idleMs
  assert.ok(sys.isActive(a));
  writes[0]?.resolve();
  assert.equal(await saved, 1, 'answered from the continuation');
  assert.equal(await got, 1, 'the stashed get saw the applied write');
  assert.equal(await inc, 2);
  assert.deepEqual(order, ['save', 'get', 'inc']);
});

test('a failed write in a continuation is a crash: the deferred reply is rejected and stashed messages go to the next activation', async () => {
  const { sys, writes, stats } = setup();
  const a = { kind: 'counter', id: 'f' } as const;
  await sys.ask(a, { type: 'inc' });
  const saved = sys.ask(a, { type: 'save' });
  const got = sys.ask(a, { type: 'get' });
  await turns();
  writes[0]?.reject(new TypeError('db down'));
  await assert.rejects(saved, /db down/);
  assert.equal(await got, 1, 'processed by a fresh activation from persisted state');
  assert.equal(stats().activations, 2);
});

test('stop() waits for I/O in flight: the continuation runs before passivation', async () => {
  const { sys, writes, persisted, stats } = setup();
  const a = { kind: 'counter', id: 'p' } as const;
  const saved = sys.ask(a, { type: 'save_then_stop' });
  await turns();
  assert.ok(sys.isActive(a), 'not passivated while the write is in flight');
  assert.equal(stats().passivations, 0);
  writes[0]?.resolve();
  assert.equal(await saved, 'saved');
  await turns();
  assert.equal(persisted.get('p'), 1);
  assert.equal(sys.isActive(a), false);
  assert.equal(stats().passivations, 1);
});
