import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TaskEvent } from '../../src/actors/ports.js';
import type { StreamResponse } from '../../src/edge/http.js';
import { SseHub } from '../../src/events/sse.js';
import { createLogger } from '../../src/shared/logger.js';

/** A StreamResponse stand-in whose socket can be made "full". */
class FakeRes {
  writes: string[] = [];
  full = false;
  buffered = 0;
  aborted = false;
  ended = false;
  closedAbruptly = false;
  private drainWaiters: Array<() => void> = [];
  private abortHandlers: Array<() => void> = [];
  writeHead(): void {}
  write(s: string): boolean {
    this.writes.push(s);
    if (this.full) this.buffered += s.length;
    return !this.full;
  }
  drained(): Promise<void> {
    return new Promise((r) => this.drainWaiters.push(r));
  }
  drain(): void {
    this.full = false;
    this.buffered = 0;
    for (const w of this.drainWaiters.splice(0)) w();
  }
  bufferedAmount(): number {
    return this.buffered;
  }
  onAbort(h: () => void): void {
    this.abortHandlers.push(h);
  }
  end(): void {
    this.ended = true;
  }
  close(): void {
    this.ended = true;
    this.closedAbruptly = true;
  }
}

const TEAM = 'team-1';
const TASK = 'task-1';
let nextId = 1;
const ev = (type: TaskEvent['type'], data: Record<string, unknown> = {}): TaskEvent => ({ id: nextId++, taskId: TASK, teamId: TEAM, type, data: { task_id: TASK, ...data }, createdAt: 0 });

function hub(maxBufferedBytes = 1024 * 1024) {
  const listeners = new Set<(e: TaskEvent) => void>();
  const first = ev('status', { status: 'running' });
  const h = new SseHub({
    source: { exists: async () => true, eventsAfter: async () => [], current: async () => ({ transition: first, progress: null }) },
    bus: {
      subscribeTask: (_id, l) => {
        listeners.add(l);
        return () => listeners.delete(l);
      },
    },
    logger: createLogger('silent'),
    maxStreamsPerTeam: 10,
    keepAliveMs: 60_000,
    maxBufferedBytes,
  });
  return { h, publish: (e: TaskEvent) => listeners.forEach((l) => l(e)), listeners };
}

const settle = () => new Promise((r) => setImmediate(r));

test('under backpressure progress ticks are coalesced to the newest; transitions are never dropped', async () => {
  const { h, publish, listeners } = hub();
  const res = new FakeRes();
  await h.serve(TEAM, TASK, null, res as unknown as StreamResponse, h.reserve(TEAM));
  assert.equal(res.writes.length, 1);
  res.full = true;
  publish(ev('progress', { progress: 0.1 })); // written, socket now full
  await settle();
  for (let i = 2; i <= 9; i++) publish(ev('progress', { progress: i / 10 }));
  const completed = ev('completed', { status: 'completed' });
  publish(completed);
  await settle();
  assert.equal(res.writes.length, 2, 'nothing more written while the socket is full');
  res.drain();
  await settle();
  await settle();
  const events = res.writes.map((w) => /event: (\w+)\ndata: (.*)\n/.exec(w)!).map((m) => [m[1], JSON.parse(m[2]!).progress ?? JSON.parse(m[2]!).status]);
  assert.deepEqual(events, [
    ['status', 'running'],
    ['progress', 0.1],
    ['progress', 0.9],
    ['completed', 'completed'],
  ]);
  assert.ok(res.ended && !res.closedAbruptly, 'closed normally after the terminal event');
  assert.equal(listeners.size, 0, 'unsubscribed');
  assert.equal(h.openStreams(TEAM), 0, 'slot released');
});

test('a slow reader past the buffer cap is dropped, not buffered without bound', async () => {
  const { h, publish } = hub(200);
  const res = new FakeRes();
  await h.serve(TEAM, TASK, null, res as unknown as StreamResponse, h.reserve(TEAM));
  res.full = true;
  res.buffered = 500; // the socket already holds more than the cap
  publish(ev('status', { status: 'running' }));
  await settle();
  assert.ok(res.closedAbruptly, 'dropped');
  assert.equal(h.openStreams(TEAM), 0);
});

test('the per-team cap counts reservations', () => {
  const { h } = hub();
  const rel = Array.from({ length: 10 }, () => h.reserve(TEAM));
  assert.throws(() => h.reserve(TEAM), /limit 10/);
  h.reserve('other-team');
  rel[0]!();
  rel[0]!(); // idempotent
  h.reserve(TEAM);
  assert.throws(() => h.reserve(TEAM));
});
