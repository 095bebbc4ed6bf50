/**
 * The webhook dispatcher: claims due deliveries (FOR UPDATE SKIP LOCKED, so any number of nodes can
 * run it), POSTs the stored body signed with the webhook's secret, and records the outcome.
 *
 * Schedule (spec): attempt 1 as soon as the event is enqueued; on failure retries after
 * 0 s (immediate), 5 s, 30 s, 2 min — 4 retries, 5 attempts in all — then failed for good, and the
 * team's admins get a webhook_failing notification. All of it is rows in PostgreSQL (next_attempt_at,
 * attempt, a lease while an attempt is in flight), so a restart loses nothing: a delivery claimed
 * by a node that died is reclaimed when its lease expires; a node shutting down gives its in-flight
 * attempts back. Times come from the injected Clock (FakeClock in tests).
 */
import { createHmac } from 'node:crypto';
import type { Clock, TimerHandle } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { DeliveryRow, EventsStore } from './store.js';
import { guardedRequest, OutboundRefused, type OutboundGuard } from './outbound.js';

export const DEFAULT_RETRY_DELAYS_MS: readonly number[] = [0, 5_000, 30_000, 120_000];

export const signBody = (secret: string, body: string): string => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

export interface DispatcherOptions {
  store: EventsStore;
  guard: OutboundGuard;
  clock: Clock;
  logger: Logger;
  /** Extra CAs for TLS (GANTRY_OUTBOUND_CA_FILE); undefined = Node's store. */
  ca?: string[] | undefined;
  retryDelaysMs?: readonly number[];
  timeoutMs?: number;
  /** How long a claimed attempt is owned before another node may take it over. */
  leaseMs?: number;
  /** Fallback poll (other nodes' enqueues, expired leases). */
  pollMs?: number;
  batch?: number;
  onFailedForGood?: (d: DeliveryRow) => Promise<void> | void;
}

type Claimed = DeliveryRow & { webhook_url: string; signing_secret: string };

export class WebhookDispatcher {
  private readonly delays: readonly number[];
  private readonly timeoutMs: number;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly batch: number;
  private timer: TimerHandle | null = null;
  private running: Promise<void> | null = null;
  private arming: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private readonly aborts = new Set<AbortController>();
  /** Attempts made by this node (tests, metrics). */
  attemptsMade = 0;

  constructor(private readonly o: DispatcherOptions) {
    this.delays = o.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS;
    this.timeoutMs = o.timeoutMs ?? 10_000;
    this.leaseMs = o.leaseMs ?? 60_000;
    this.pollMs = o.pollMs ?? 5_000;
    this.batch = o.batch ?? 32;
  }

  get maxAttempts(): number {
    return this.delays.length + 1;
  }

  start(): void {
    this.poke();
  }

  private scheduled = false;

  /** Run soon (new deliveries were enqueued, or a timer fired): on the next turn of the event loop. */
  poke(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.runNow();
    });
  }

  private runNow(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.timer?.cancel();
    this.timer = null;
    this.running = this.loop().finally(() => {
      this.running = null;
      if (this.again && !this.stopped) {
        this.again = false;
        this.poke();
      } else this.arming = this.arm().finally(() => (this.arming = null));
    });
  }

  /** Resolves when no run is in progress and the next wake-up is armed (tests). */
  async idle(): Promise<void> {
    while (this.running || this.arming || this.scheduled) {
      if (this.scheduled && !this.running) await new Promise((r) => setImmediate(r));
      await this.running;
      await this.arming;
    }
  }

  private async arm(): Promise<void> {
    if (this.stopped || this.running) return;
    let wait = this.pollMs;
    try {
      const due = await this.o.store.nextDueAt();
      if (due !== null) wait = Math.max(0, Math.min(wait, due - this.o.clock.now()));
    } catch (err) {
      this.o.logger.warn({ err }, 'webhook dispatcher: reading the next due time failed');
    }
    if (this.stopped || this.running) return;
    this.timer?.cancel();
    if (wait <= 0) this.poke();
    else this.timer = this.o.clock.setTimeout(() => this.poke(), wait);
  }

  private async loop(): Promise<void> {
    for (let round = 0; round < 1000 && !this.stopped; round++) {
      let claimed: Claimed[];
      try {
        claimed = await this.o.store.claimDue(this.o.clock.now(), this.leaseMs, this.batch);
      } catch (err) {
        this.o.logger.warn({ err }, 'webhook dispatcher: claim failed');
        return;
      }
      if (claimed.length === 0) return;
      await Promise.all(claimed.map((d) => this.attempt(d)));
    }
  }

  private async attempt(d: Claimed): Promise<void> {
    const startedAt = this.o.clock.now();
    const attempt = Number(d.attempt);
    const ac = new AbortController();
    this.aborts.add(ac);
    let status = 0;
    let latencyMs: number | null = null;
    let error: string | null = null;
    try {
      this.attemptsMade++;
      const r = await guardedRequest(this.o.guard, d.webhook_url, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'User-Agent': 'Gantry-Webhook/1',
          'X-Webhook-Signature-256': signBody(d.signing_secret, d.body),
          'X-Webhook-Event': d.event_type,
          'X-Webhook-Delivery': d.id,
          'X-Webhook-Attempt': String(attempt),
        },
        body: d.body,
        timeoutMs: this.timeoutMs,
        ca: this.o.ca,
        signal: ac.signal,
      });
      status = r.status;
      latencyMs = r.latencyMs;
      if (status < 200 || status > 299) error = `HTTP ${status}`;
    } catch (e) {
      error = e instanceof OutboundRefused ? `refused: ${e.message}` : (e as Error).message || String(e);
    } finally {
      this.aborts.delete(ac);
    }
    const now = this.o.clock.now();
    try {
      if (this.stopped && ac.signal.aborted) {
        await this.o.store.releaseAttempt(d.id, attempt, now);
        return;
      }
      if (error === null) {
        await this.o.store.recordAttempt(d.id, { attempt, status: 'succeeded', responseCode: status, latencyMs, error: null, startedAt, now, nextAt: null });
        return;
      }
      const final = attempt >= Number(d.max_attempts);
      const nextAt = final ? null : now + (this.delays[attempt - 1] ?? this.delays[this.delays.length - 1] ?? 0);
      await this.o.store.recordAttempt(d.id, { attempt, status: final ? 'failed' : 'pending', responseCode: status || null, latencyMs, error, startedAt, now, nextAt });
      this.o.logger.info({ delivery_id: d.id, webhook_id: d.webhook_id, attempt, error, final }, 'webhook delivery attempt failed');
      if (final) await this.o.onFailedForGood?.(d);
    } catch (err) {
      // the lease expires and another pass retries the attempt
      this.o.logger.warn({ err, delivery_id: d.id }, 'webhook dispatcher: recording the attempt failed');
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    for (const ac of this.aborts) ac.abort();
    await this.idle();
  }
}
