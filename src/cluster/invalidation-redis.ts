/**
 * Cache invalidation across nodes over Redis pub/sub, with acknowledgements: publish() applies the
 * event on this node synchronously, PUBLISHes it, and resolves once every subscriber that received
 * it (PUBLISH returns their number, this node's own included) has applied it and acknowledged on this
 * node's ack channel, or after a timeout (logged with how many nodes did not answer). The identity
 * service awaits it before the revoking request answers, so a revoked credential is refused on every
 * node on its next request.
 *
 * A node that cannot hear invalidations (its subscriber connection is down) reports itself unhealthy
 * through state(): the auth cache is then emptied and bypassed (every request is checked against
 * PostgreSQL) until the subscription is back, and the generation changes on every re-subscription.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { InvalidationSchema, type CacheInvalidationPort, type Invalidation } from '../identity/invalidation.js';
import type { Logger } from '../shared/logger.js';
import type { Redis, RedisConnection } from './redis.js';

const Message = z.object({ o: z.string().min(1).max(300), id: z.string().min(1).max(64), ev: InvalidationSchema });
const Ack = z.object({ id: z.string().min(1).max(64) });

export class RedisInvalidation implements CacheInvalidationPort {
  private readonly subscribers = new Set<(ev: Invalidation) => void>();
  private sub: Redis | null = null;
  private healthy = false;
  private generation = 0;
  private readonly waiting = new Map<string, { need: number; got: number; done: () => void }>();
  private readonly channel: string;
  private readonly ackPrefix: string;
  /** Tests: a frozen node receives but never applies nor acknowledges. */
  frozen = false;

  constructor(
    private readonly conn: RedisConnection,
    /** This process's id (stable for its lifetime). */
    private readonly origin: string,
    private readonly logger: Logger,
    private readonly ackTimeoutMs = 2000,
  ) {
    this.channel = `${conn.prefix}invalidations`;
    this.ackPrefix = `${conn.prefix}invalidation-acks:`;
  }

  async start(): Promise<void> {
    const sub = await this.conn.subscriber();
    this.sub = sub;
    await sub.subscribe(this.channel, (raw: string) => this.onMessage(raw));
    await sub.subscribe(`${this.ackPrefix}${this.origin}`, (raw: string) => this.onAck(raw));
    this.healthy = true;
    this.generation++;
    sub.on('error', () => {
      if (this.healthy) this.logger.warn('invalidation broadcast: subscription lost; identity caches bypassed until it is back');
      this.healthy = false;
    });
    sub.on('end', () => (this.healthy = false));
    sub.on('ready', () => {
      if (this.healthy) return;
      this.generation++;
      this.healthy = true;
      this.logger.info('invalidation broadcast: subscription restored; identity caches start empty');
    });
  }

  state(): { healthy: boolean; generation: number } {
    return { healthy: this.healthy, generation: this.generation };
  }

  private applyLocally(ev: Invalidation): void {
    for (const fn of [...this.subscribers]) {
      try {
        fn(ev);
      } catch (e) {
        this.logger.warn({ err: e }, 'invalidation subscriber failed');
      }
    }
  }

  publish(ev: Invalidation): Promise<void> {
    const checked = InvalidationSchema.parse(ev);
    this.applyLocally(checked);
    const id = randomUUID();
    const msg = JSON.stringify({ o: this.origin, id, ev: checked });
    return new Promise<void>((resolve) => {
      let settled = false;
      const done = (): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.waiting.delete(id);
        resolve();
      };
      const timer = setTimeout(() => {
        const w = this.waiting.get(id);
        if (w) this.logger.warn({ invalidation: checked.type, receivers: w.need, acknowledged: w.got }, 'invalidation broadcast: not every node acknowledged in time');
        done();
      }, this.ackTimeoutMs);
      // registered before the PUBLISH: an ack may arrive before its reply
      const entry = { need: Number.POSITIVE_INFINITY, got: 0, done };
      this.waiting.set(id, entry);
      this.conn.client.publish(this.channel, msg).then(
        (n) => {
          // this node's own subscriber is one of the receivers (it acknowledges too)
          entry.need = Number(n);
          if (entry.got >= entry.need) done();
        },
        (e: unknown) => {
          this.logger.error({ err_message: (e as Error).message, invalidation: checked.type }, 'invalidation broadcast: PUBLISH failed (other nodes bypass their caches only once they see the outage)');
          done();
        },
      );
    });
  }

  private onMessage(raw: string): void {
    if (this.frozen) return;
    let m: z.infer<typeof Message>;
    try {
      m = Message.parse(JSON.parse(raw));
    } catch {
      return;
    }
    if (m.o !== this.origin) this.applyLocally(m.ev);
    this.conn.client.publish(`${this.ackPrefix}${m.o}`, JSON.stringify({ id: m.id })).catch(() => undefined);
  }

  private onAck(raw: string): void {
    let a: z.infer<typeof Ack>;
    try {
      a = Ack.parse(JSON.parse(raw));
    } catch {
      return;
    }
    const w = this.waiting.get(a.id);
    if (!w) return;
    w.got++;
    if (w.got >= w.need) w.done();
  }

  subscribe(fn: (ev: Invalidation) => void): () => void {
    const own = (ev: Invalidation): void => fn(ev);
    this.subscribers.add(own);
    return () => {
      this.subscribers.delete(own);
    };
  }

  async stop(): Promise<void> {
    this.healthy = false;
    const s = this.sub;
    this.sub = null;
    await s?.close().catch(() => undefined);
    for (const w of this.waiting.values()) w.done();
  }
}
