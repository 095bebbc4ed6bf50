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
  bus: { subscribeAll(l: (e: TaskEvent) => void): () => void };
  clock: Clock;
  logger: Logger;
  maxAttempts: number;
  scanIntervalMs: number;
  /** New deliveries exist: wake the dispatcher. */
  onEnqueued: () => void;
}

const CURSOR = 'outbox';

export class OutboxFeeder {
  private unsub: (() => void) | null = null;
  private timer: TimerHandle | null = null;
  private processed = new Set<number>();
  private inflight = new Set<Promise<void>>();
  private scanning: Promise<void> | null = null;
  private stopped = false;

  constructor(private readonly o: OutboxFeederOptions) {}

  async start(): Promise<void> {
    this.unsub = this.o.bus.subscribeAll((e) => {
      if (!TERMINAL_EVENTS.has(e.type) || this.processed.has(e.id) || this.stopped) return;
      const p = this.handle(e)
        .catch((err: unknown) => this.o.logger.warn({ err, task_event_id: e.id }, 'outbox enqueue failed; the scan will retry'))
        .finally(() => this.inflight.delete(p));
      this.inflight.add(p);
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

  /** Enqueues deliveries and the notification for one terminal event (one transaction). */
  async handle(e: TaskEvent): Promise<void> {
    const n = await this.o.store.inTx(async (qq) => {
      const created = await this.o.store.enqueue(qq, e, this.o.clock.now(), this.o.maxAttempts);
      await this.o.notifier.forTerminalEvent(qq, e);
      return created;
    });
    this.processed.add(e.id);
    if (n > 0) this.o.onEnqueued();
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
        for (const e of events) {
          if (!this.processed.has(e.id)) await this.handle(e);
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
    await Promise.allSettled([...this.inflight]);
  }
}
