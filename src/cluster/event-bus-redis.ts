/**
 * Task events across nodes over Redis pub/sub. publish() delivers to this node's listeners first
 * (synchronously, as on a single node) and then PUBLISHes the batch on one channel, tagged with this
 * node's origin id and a per-origin sequence number. Each node's subscriber delivers other origins'
 * events to its listeners.
 *
 * Pub/sub is at most once: a node that dies between commit and publish, a failed PUBLISH or a
 * subscriber that reconnects loses messages. Receivers notice a gap (a sequence number skipped, a
 * reconnect) and call onGap; the SSE hub then re-reads PostgreSQL (task_events is the truth) for its
 * streams. The webhook outbox has its own PostgreSQL scan for the same reason.
 */
import { z } from 'zod';
import type { TaskEvent } from '../actors/ports.js';
import type { Logger } from '../shared/logger.js';
import { LocalEventBus } from './event-bus.js';
import type { Redis, RedisConnection } from './redis.js';

const EventSchema = z.object({
  id: z.number().int().positive(),
  taskId: z.string().min(1).max(64),
  teamId: z.string().min(1).max(64),
  type: z.enum(['status', 'progress', 'completed', 'failed', 'cancelled']),
  data: z.record(z.string(), z.unknown()),
  createdAt: z.number(),
});
const Message = z.object({ o: z.string().min(1).max(300), s: z.number().int().nonnegative(), e: z.array(EventSchema).max(10_000) });

export class RedisEventBus extends LocalEventBus {
  private seq = 0;
  private readonly lastSeq = new Map<string, number>();
  private sub: Redis | null = null;
  private readonly gapFns = new Set<() => void>();
  private readonly channel: string;
  private badLoggedAt = 0;
  private publishFailing = false;
  /** Messages published / received from other nodes / gaps noticed (metrics, tests). */
  readonly stats = { published: 0, received: 0, gaps: 0 };
  /** Tests: when set, the PUBLISH is lost (a failed PUBLISH: its sequence number is used, the message never arrives). */
  dropPublishes = false;

  constructor(
    private readonly conn: RedisConnection,
    /** This process's id (stable for its lifetime). */
    originId: string,
    private readonly logger: Logger,
  ) {
    super();
    this.channel = `${conn.prefix}task-events`;
    this.origin = originId;
  }

  async start(): Promise<void> {
    const sub = await this.conn.subscriber();
    this.sub = sub;
    await sub.subscribe(this.channel, (raw: string) => this.onMessage(raw));
    let lost = false;
    sub.on('error', () => (lost = true));
    sub.on('ready', () => {
      if (!lost) return;
      lost = false;
      // re-subscribed: what was published meanwhile never arrived
      this.lastSeq.clear();
      this.gap('subscriber reconnected');
    });
  }

  /** Called when messages may have been lost (the SSE hub re-reads PostgreSQL). */
  onGap(fn: () => void): () => void {
    this.gapFns.add(fn);
    return () => this.gapFns.delete(fn);
  }

  private gap(why: string): void {
    this.stats.gaps++;
    this.logger.info({ why }, 'task event bus: possible gap; streams re-read PostgreSQL');
    for (const fn of [...this.gapFns]) {
      try {
        fn();
      } catch {
        /* one listener's failure is its own */
      }
    }
  }

  override publish(events: readonly TaskEvent[]): void {
    if (events.length === 0) return;
    super.publish(events);
    const msg = JSON.stringify({ o: this.origin, s: ++this.seq, e: events });
    if (this.dropPublishes) return;
    this.stats.published++;
    this.conn.client.publish(this.channel, msg).then(
      () => {
        if (this.publishFailing) this.logger.info('task event bus: publishing again');
        this.publishFailing = false;
      },
      (e: unknown) => {
        if (!this.publishFailing) this.logger.warn({ err_message: (e as Error).message }, 'task event bus: PUBLISH failed (receivers re-read PostgreSQL on the gap)');
        this.publishFailing = true;
      },
    );
  }

  private onMessage(raw: string): void {
    let m: z.infer<typeof Message>;
    try {
      m = Message.parse(JSON.parse(raw));
    } catch (e) {
      const now = Date.now();
      if (now - this.badLoggedAt > 60_000) {
        this.badLoggedAt = now;
        this.logger.warn({ err_message: (e as Error).message.slice(0, 200) }, 'task event bus: malformed message dropped');
      }
      return;
    }
    if (m.o === this.origin) return; // ours: delivered at publish
    this.stats.received++;
    const last = this.lastSeq.get(m.o);
    this.lastSeq.set(m.o, m.s);
    // before delivering: streams that may have missed something re-read PostgreSQL first, so the
    // newer event cannot overtake the lost one
    if (last !== undefined && m.s !== last + 1) this.gap(`sequence of ${m.o} jumped from ${last} to ${m.s}`);
    for (const e of m.e) this.deliver(e as TaskEvent, m.o);
  }

  async stop(): Promise<void> {
    const s = this.sub;
    this.sub = null;
    await s?.close().catch(() => undefined);
  }
}
