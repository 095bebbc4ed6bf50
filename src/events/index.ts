/**
 * Live events (docs/api.md): the SSE hub, the webhook outbox feeder and dispatcher, outbound
 * safety and the notification center, wired from one object the composition root starts and stops.
 */
import type { TaskEvent } from '../actors/ports.js';
import type { Database } from '../persistence/db.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import { WebhookDispatcher, DEFAULT_RETRY_DELAYS_MS } from './dispatcher.js';
import { AgentOfflineWatcher, Notifier, type SystemNotice } from './notifier.js';
import { OutboundGuard, outboundCa } from './outbound.js';
import { OutboxFeeder } from './outbox.js';
import { SseHub } from './sse.js';
import { EventsStore, TaskEventSource } from './store.js';

export { SseHub } from './sse.js';
export type { SseSink } from './sse.js';
export { OutboundGuard, OutboundRefused, guardedRequest, blockedReason } from './outbound.js';
export { signBody, DEFAULT_RETRY_DELAYS_MS } from './dispatcher.js';

export interface LiveEventsOptions {
  db: Database;
  bus: {
    subscribeTask(taskId: string, l: (e: TaskEvent, origin?: string) => void): () => void;
    subscribeAll(l: (e: TaskEvent, origin?: string) => void): () => void;
    isLocal?(origin: string | undefined): boolean;
  };
  clock: Clock;
  logger: Logger;
  outboundAllowlist: string | undefined;
  outboundCaFile: string | undefined;
  maxStreamsPerTeam: number;
  keepAliveMs: number;
  retryDelaysMs?: readonly number[];
  webhookTimeoutMs?: number;
  /** Outbox safety-net scan of task_events (default 5 s). */
  scanIntervalMs?: number;
  /** Agent-offline scan (default 10 s). */
  agentScanMs?: number;
}

export class LiveEvents {
  readonly store: EventsStore;
  readonly sse: SseHub;
  readonly guard: OutboundGuard;
  readonly notifier: Notifier;
  readonly dispatcher: WebhookDispatcher;
  readonly feeder: OutboxFeeder;
  readonly agentWatcher: AgentOfflineWatcher;

  constructor(o: LiveEventsOptions) {
    const log = o.logger.child({ component: 'events' });
    this.store = new EventsStore(o.db);
    this.guard = new OutboundGuard({ allowlist: o.outboundAllowlist });
    this.notifier = new Notifier(this.store, o.clock, log);
    this.sse = new SseHub({ source: new TaskEventSource(o.db), bus: o.bus, logger: log, maxStreamsPerTeam: o.maxStreamsPerTeam, keepAliveMs: o.keepAliveMs });
    this.dispatcher = new WebhookDispatcher({
      store: this.store,
      guard: this.guard,
      clock: o.clock,
      logger: log,
      ca: outboundCa(o.outboundCaFile),
      retryDelaysMs: o.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS,
      timeoutMs: o.webhookTimeoutMs ?? 10_000,
      onFailedForGood: async (d) => {
        const hour = new Date(o.clock.now()).toISOString().slice(0, 13);
        await this.notifier.notifySystem(d.team_id, 'webhook_failing', {
          title: 'Webhook failing',
          message: `A ${d.event_type} delivery for task ${d.task_id} failed ${d.attempt} times (last error: ${d.last_error ?? 'see the delivery log'}); the event was not delivered.`,
          webhookId: d.webhook_id,
          taskId: d.task_id,
          dedupeKey: `webhook_failing:${d.webhook_id}:${hour}`,
        });
      },
    });
    this.feeder = new OutboxFeeder({
      store: this.store,
      notifier: this.notifier,
      bus: o.bus,
      clock: o.clock,
      logger: log,
      maxAttempts: this.dispatcher.maxAttempts,
      scanIntervalMs: o.scanIntervalMs ?? 5_000,
      onEnqueued: () => this.dispatcher.poke(),
    });
    this.agentWatcher = new AgentOfflineWatcher(this.store, this.notifier, o.clock, log, o.agentScanMs ?? 10_000);
  }

  async start(): Promise<void> {
    await this.feeder.start();
    await this.agentWatcher.start();
    this.dispatcher.start();
  }

  /** A system alert for the team's owner and admins; call it from anywhere that detects one. */
  notifySystem(teamId: string, kind: string, n: SystemNotice): Promise<number> {
    return this.notifier.notifySystem(teamId, kind, n);
  }

  async stop(): Promise<void> {
    this.sse.closeAll();
    await this.feeder.stop();
    await this.agentWatcher.stop();
    await this.dispatcher.stop();
  }
}
