/**
 * The outbox feeder: turns terminal task_events rows into webhook deliveries and notifications.
 *
 * Two paths feed the same idempotent writer (unique (webhook_id, task_event_id) for deliveries, a
 * per-user dedupe key for notifications), so each terminal event is enqueued exactly once per
 * matching active webhook whichever path (or node) gets there first:
 *   - the bus (subscribeAll): prompt, right after the transition committed;
 *   - a periodic scan of task_events after a persisted cursor: catches what a crash between commit
 *     and publish lost. The cursor only moves past events older than a settle window (bigserial ids
 *     can commit out of order), and events already handled in memory are skipped.
 * Each write is ONE autocommit statement for a whole batch of events (store.enqueueTerminal): the
 * bus path queues events and keeps at most one write in flight, so a burst of completions arriving
 * while a write runs goes out together in the next one; the scan writes its page in one statement.
 * A batch that fails is retried event by event, so one bad event never holds back the others.
 */
import type { TaskEvent } from '../actors/ports.js';
import type { Clock, TimerHandle } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { EventsStore } from './store.js';
import type { Notifier } from './notifier.js';
import { TERMINAL_EVENTS } from './sse.js';

export interface OutboxFeederOptions {
  store: EventsStore;
  notifier: Notifier;
  /** isLocal: cluster — only events this node published are fed from the bus (every node gets every event; the scan covers a dead node's). */
  bus: { subscribeAll(l: (e: TaskEvent, origin?: string) => void): () => void; isLocal?(origin: string | undefined): boolean };
  clock: Clock;
  logger: Logger;
  maxAttempts: number;
  scanIntervalMs: number;
  /** New deliveries exist: wake the dispatcher. */
  onEnqueued: () => void;
}

const CURSOR = 'outbox';
/** Events per statement (bus batches and scan pages). */
const BATCH = 200;

export class OutboxFeeder {
  private unsub: (() => void) | null = null;
  private timer: TimerHandle | null = null;
  private processed = new Set<number>();
  /** Bus events waiting for the next write (by id: a re-published event is queued once). */
  private pending = new Map<number, TaskEvent>();
  private flushing: Promise<void> | null = null;
  private scanning: Promise<void> | null = null;
  private stopped = false;

  constructor(private readonly o: OutboxFeederOptions) {}

  async start(): Promise<void> {
    this.unsub = this.o.bus.subscribeAll((e, origin) => {
      if (!TERMINAL_EVENTS.has(e.type) || this.processed.has(e.id) || this.stopped) return;
      if (this.o.bus.isLocal && !this.o.bus.isLocal(origin)) return;
      this.pending.set(e.id, e);
      this.kick();
    });
    await this.scan();
    this.arm();
  }

  private arm(): void {
    if (this.stopped) return;
    this.timer = this.o.clock.setTimeout(() => {
      void this.scan().finally(() => this.arm());
    }, this.o.scanIntervalMs);
  }

  /** Starts the bus writer unless it runs (it drains the queue, BATCH events per statement). */
  private kick(): void {
    if (this.flushing || this.pending.size === 0) return;
    this.flushing = this.drain().finally(() => {
      this.flushing = null;
      this.kick();
    });
  }

  private async drain(): Promise<void> {
    await Promise.resolve(); // let a synchronous burst (one publish of several events) join the first batch
    while (this.pending.size > 0) {
      const batch: TaskEvent[] = [];
      for (const [id, e] of this.pending) {
        this.pending.delete(id);
        if (!this.processed.has(id)) batch.push(e);
        if (batch.length === BATCH) break;
      }
      try {
        await this.handleBatch(batch);
      } catch (err) {
        this.o.logger.warn({ err, task_event_ids: batch.map((e) => e.id) }, 'outbox enqueue failed; the scan will retry');
      }
    }
  }

  /** Enqueues deliveries and the notification for one terminal event (one statement). */
  handle(e: TaskEvent): Promise<void> {
    return this.handleBatch([e]);
  }

  /**
   * Enqueues deliveries and notifications for terminal events, one statement for all of them; if
   * that fails, one statement per event (the first failure is rethrown once all were tried).
   */
  private async handleBatch(events: readonly TaskEvent[]): Promise<void> {
    if (events.length === 0) return;
    try {
      await this.write(events);
    } catch (err) {
      if (events.length === 1) throw err;
      let first: unknown = null;
      for (const e of events) {
        try {
          await this.write([e]);
        } catch (err1) {
          first ??= err1;
        }
      }
      if (first !== null) throw first;
    }
  }

  private async write(events: readonly TaskEvent[]): Promise<void> {
    const items = events.map((e) => ({ e, notice: this.o.notifier.terminalNotice(e) }));
    const { deliveries } = await this.o.store.enqueueTerminal(items, this.o.clock.now(), this.o.maxAttempts);
    for (const e of events) this.processed.add(e.id);
    if (deliveries > 0) this.o.onEnqueued();
  }

  /** One pass over task_events after the cursor (also callable from tests). */
  scan(): Promise<void> {
    this.scanning ??= this.doScan().finally(() => (this.scanning = null));
    return this.scanning;
  }

  private async doScan(): Promise<void> {
    try {
      const cursor = await this.o.store.cursor(CURSOR);
      let after = cursor;
      let advanceTo = cursor;
      let settledPrefix = true;
      for (;;) {
        const { events, settledBefore } = await this.o.store.terminalEventsAfter(after, 500);
        const todo = events.filter((e) => !this.processed.has(e.id));
        for (let i = 0; i < todo.length; i += BATCH) await this.handleBatch(todo.slice(i, i + BATCH));
        for (const e of events) {
          if (settledPrefix && e.createdAt < settledBefore) advanceTo = e.id;
          else settledPrefix = false;
        }
        if (events.length < 500 || this.stopped) break;
        after = events[events.length - 1]?.id ?? after;
      }
      if (advanceTo > cursor) {
        await this.o.store.advanceCursor(CURSOR, advanceTo);
        for (const id of this.processed) if (id <= advanceTo) this.processed.delete(id);
      }
    } catch (err) {
      this.o.logger.warn({ err }, 'outbox scan failed');
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.unsub?.();
    this.timer?.cancel();
    await this.scanning;
    // queued bus events are written before the node goes (the scan would recover them anyway)
    while (this.flushing) await this.flushing;
  }
}
