/**
 * Compile-time tests: tsc (which checks test/) fails if any line marked @ts-expect-error compiles,
 * i.e. if the typed actor API stopped rejecting a wrong message. The runtime part only checks that
 * the well-typed calls are what the runtime accepts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ActorRef, ActorSystemPort, ReplyOf, Protocols } from '../../src/actors/ports.js';
import type { Handlers } from '../../src/actors/runtime/handlers.js';
import type { TaskMsg } from '../../src/actors/task/protocol.js';
import type { TaskRecord as Rec } from '../../src/domain/tasks/record.js';

/** A port that records what it is given (never called with a wrong message: those lines do not compile). */
function recorder(): { sys: ActorSystemPort; sent: unknown[] } {
  const sent: unknown[] = [];
  const sys: ActorSystemPort = {
    tell: (ref, msg) => void sent.push([ref.kind, msg]),
    ask: async (ref, msg) => {
      sent.push([ref.kind, msg]);
      return undefined as never;
    },
  };
  return { sys, sent };
}

const taskRef: ActorRef<'task'> = { kind: 'task', id: 't1' };
const schedRef: ActorRef<'team-scheduler'> = { kind: 'team-scheduler', id: 'team' };

test('tell/ask accept only the messages of the ref\'s kind', () => {
  const { sys, sent } = recorder();
  sys.tell(taskRef, { type: 'ack', attempt: 1, epoch: 1 });
  sys.tell(schedRef, { type: 'kick' });
  // @ts-expect-error a scheduler message told to a task ref
  sys.tell(taskRef, { type: 'kick' });
  // @ts-expect-error a task message told to a scheduler ref
  sys.tell(schedRef, { type: 'cancel' });
  // @ts-expect-error an ask with a wrong message shape (epoch must be a number)
  void sys.ask(taskRef, { type: 'ack', attempt: 1, epoch: 'one' });
  // @ts-expect-error an ask missing a required field
  void sys.ask(taskRef, { type: 'finish', epoch: 1 });
  // @ts-expect-error an unknown actor kind
  sys.tell({ kind: 'gpu-pool', id: 'x' }, { type: 'get' });
  assert.equal(sent.length, 7, 'the runtime would have been handed them; only the compiler stops them');
});

test('ask returns the reply type of the message type', async () => {
  const { sys } = recorder();
  type GetReply = ReplyOf<Protocols, 'task', 'get'>;
  const isRecord: GetReply extends Rec ? (Rec extends GetReply ? true : false) : false = true;
  assert.equal(isRecord, true);
  const stats = async () => {
    const s = await sys.ask(schedRef, { type: 'stats' });
    const n: number = s.queued;
    // @ts-expect-error a stats reply has no epoch
    void s.epoch;
    return n;
  };
  const get = async () => {
    const t = await sys.ask(taskRef, { type: 'get' });
    const status: Rec['status'] = t.status;
    return status;
  };
  assert.equal(typeof stats, 'function');
  assert.equal(typeof get, 'function');
});

test('a handler map must have exactly one handler per message type', () => {
  const ok = (): number => 1;
  const full: Handlers<TaskMsg, [], number> = {
    assign: ok,
    mark_waiting: ok,
    provisioned: ok,
    ack: (m) => m.epoch, // each handler receives exactly its own message
    ack_timeout: ok,
    progress: (m) => m.progress.progress,
    flush_progress: ok,
    finish: ok,
    fail: ok,
    timeout: ok,
    agent_lost: ok,
    reattach: ok,
    grace_expired: ok,
    cancel: ok,
    recover: ok,
    get: ok,
    cloud_accept: ok,
    cloud_start: ok,
    cloud_reject: ok,
  };
  // @ts-expect-error 'get' is missing
  const missing: Handlers<TaskMsg, [], number> = {
    assign: ok,
    mark_waiting: ok,
    provisioned: ok,
    ack: ok,
    ack_timeout: ok,
    progress: ok,
    flush_progress: ok,
    finish: ok,
    fail: ok,
    timeout: ok,
    agent_lost: ok,
    reattach: ok,
    grace_expired: ok,
    cancel: ok,
    recover: ok,
  };
  const wrongMsg: Handlers<TaskMsg, [], number> = {
    ...full,
    // @ts-expect-error the ack handler does not get a finish message's fields
    ack: (m) => Object.keys(m.output).length,
  };
  assert.equal(Object.keys(full).length, 19);
  assert.ok(missing && wrongMsg);
});
