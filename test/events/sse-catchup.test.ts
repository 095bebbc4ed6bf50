// SSE across nodes: pub/sub may lose an event (its node died between commit and publish). A stream
// that sees the task's events come from another origin, or is told to resync (a membership change,
// a bus gap), re-reads task_events before it sends anything newer: nothing is skipped, nothing twice.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SseHub, type SseSink, type SseTaskSource } from '../../src/events/sse.js';
import { LocalEventBus } from '../../src/cluster/event-bus.js';
import { createLogger } from '../../src/shared/logger.js';
import type { TaskEvent } from '../../src/actors/ports.js';

class Sink implements SseSink {
  aborted = false;
  ended = false;
  out = '';
  onAbort(): void {}
  writeHead(): void {}
  write(chunk: string): boolean {
    this.out += chunk;
    return true;
  }
  async drained(): Promise<void> {}
  bufferedAmount(): number {
    return 0;
  }
  end(): void {
    this.ended = true;
  }
  close(): void {
    this.ended = true;
  }
  ids(): number[] {
    return [...this.out.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
  }
}

/** task_events as PostgreSQL holds them (committed rows), with a count of reads. */
class Rows implements SseTaskSource {
  rows: TaskEvent[] = [];
  reads = 0;
  async exists(): Promise<boolean> {
    return true;
  }
  async eventsAfter(_team: string, taskId: string, afterId: number, limit: number): Promise<TaskEvent[]> {
    this.reads++;
    return this.rows.filter((e) => e.taskId === taskId && e.id > afterId).slice(0, limit);
  }
  async current(): Promise<{ transition: TaskEvent | null; progress: TaskEvent | null }> {
    return { transition: null, progress: null };
  }
}

const ev = (id: number, type: TaskEvent['type'] = 'status'): TaskEvent => ({ id, taskId: 't1', teamId: 'team', type, data: { status: type }, createdAt: 0 });
const tick = (): Promise<void> => new Promise((r) => setTimeout(r, 10));

async function open() {
  const rows = new Rows();
  const bus = new LocalEventBus();
  const hub = new SseHub({ source: rows, bus, logger: createLogger('silent'), maxStreamsPerTeam: 10, keepAliveMs: 60_000 });
  const sink = new Sink();
  await hub.serve('team', 't1', 0, sink, () => undefined);
  return { rows, bus, hub, sink };
}

test('an event from another origin makes the stream re-read first: the event its old writer never published is sent, in order, once', async () => {
  const { rows, bus, sink } = await open();
  const e1 = ev(1);
  rows.rows.push(e1);
  bus.deliver(e1, 'node-a');
  await tick();
  // node A commits event 2 and dies before publishing it; node B takes over and publishes event 3
  rows.rows.push(ev(2));
  const e3 = ev(3);
  rows.rows.push(e3);
  bus.deliver(e3, 'node-b');
  await tick();
  assert.deepEqual(sink.ids(), [1, 2, 3]);
  // steady state (same origin): no re-read per event
  const reads = rows.reads;
  const e4 = ev(4, 'progress');
  rows.rows.push(e4);
  bus.deliver(e4, 'node-b');
  await tick();
  assert.equal(rows.reads, reads, 'no read while the origin stays the same');
  assert.deepEqual(sink.ids(), [1, 2, 3, 4]);
});

test('resync (a membership change, a bus gap) re-reads at once: a lost terminal event still arrives and ends the stream', async () => {
  const { rows, bus, hub, sink } = await open();
  const e1 = ev(1);
  rows.rows.push(e1);
  bus.deliver(e1, 'node-a');
  await tick();
  rows.rows.push(ev(2, 'completed')); // committed, never published
  hub.resync();
  await tick();
  assert.deepEqual(sink.ids(), [1, 2]);
  assert.equal(sink.ended, true);
});

test('events arriving while a re-read is in flight are held and sent after it, without duplicates', async () => {
  const { rows, bus, hub, sink } = await open();
  rows.rows.push(ev(1), ev(2));
  hub.resync();
  const e2 = ev(2);
  const e3 = ev(3);
  rows.rows.push(e3);
  bus.deliver(e2, 'node-a');
  bus.deliver(e3, 'node-a');
  await tick();
  assert.deepEqual(sink.ids(), [1, 2, 3]);
});
