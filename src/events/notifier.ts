/**
 * The in-app notification center's writer. Kinds (docs/api.md):
 *   task_completed, task_failed, task_cancelled  one per terminal task, for the user who ran it
 *                                                (tasks.created_by_user_id) or, for sk- runs, the
 *                                                team's owner and admins
 *   agent_offline                                an agent's stream ended and its grace period ran out
 *   webhook_failing                              a delivery failed its last attempt
 *   <any>                                        notifySystem(teamId, kind, title, message)
 * Every write carries a dedupe key (unique per user), so re-processing an event is harmless.
 */
import type { TaskEvent } from '../actors/ports.js';
import type { Clock, TimerHandle } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { EventsStore, TerminalNotice } from './store.js';

export interface SystemNotice {
  title: string;
  message: string;
  agentId?: string | null;
  webhookId?: string | null;
  taskId?: string | null;
  /** Same key twice (per user) = one notification. Default: none (always a new one). */
  dedupeKey?: string | null;
}

export class Notifier {
  constructor(
    private readonly store: EventsStore,
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {}

  /**
   * The text of a task's terminal notification (the outbox writer inserts it, in the same statement
   * as the webhook deliveries, for the user who ran the task or, for sk- runs, the owner and admins).
   * The message is "<workflow slug> task <id> ..." : the slug is read from the task row in SQL.
   */
  terminalNotice(e: TaskEvent): TerminalNotice {
    const d = e.data as { error?: string; retry_task_id?: string };
    const name = ` task ${e.taskId}`;
    const text =
      e.type === 'completed'
        ? { title: 'Task completed', messageSuffix: `${name} completed.` }
        : e.type === 'failed'
          ? { title: 'Task failed', messageSuffix: `${name} failed: ${d.error ?? 'unknown error'}${d.retry_task_id ? ` (retrying as task ${d.retry_task_id})` : ''}` }
          : { title: 'Task cancelled', messageSuffix: `${name} was cancelled.` };
    return { kind: `task_${e.type}`, ...text, dedupeKey: `task:${e.taskId}:${e.type}` };
  }

  /** A system alert for the team's owner and admins (agent offline, webhook failing, ...). */
  async notifySystem(teamId: string, kind: string, n: SystemNotice): Promise<number> {
    return this.store.inTx(async (qq) => {
      const admins = await this.store.teamAdmins(qq, teamId);
      return this.store.insertNotifications(qq, {
        teamId,
        userIds: admins,
        kind,
        title: n.title,
        message: n.message,
        taskId: n.taskId ?? null,
        agentId: n.agentId ?? null,
        webhookId: n.webhookId ?? null,
        dedupeKey: n.dedupeKey ?? null,
        now: this.clock.now(),
      });
    });
  }
}

/**
 * Agent-offline alerts without touching the agent actor: a periodic scan of agents whose row
 * changed since the last scan; an agent seen online/busy/draining and now offline gets one
 * agent_offline notification (deduped by its offline timestamp). Agents marked offline by a node
 * restart (no updated_at change) are not reported.
 */
export class AgentOfflineWatcher {
  private known = new Map<string, string>();
  private since = 0;
  private timer: TimerHandle | null = null;
  private stopped = false;
  private running: Promise<void> | null = null;

  constructor(
    private readonly store: EventsStore,
    private readonly notifier: Notifier,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly intervalMs: number,
  ) {}

  async start(): Promise<void> {
    this.since = Date.now() - 1000;
    // seed the known statuses without alerting
    for (const a of await this.store.agentsChangedSince(0)) {
      this.known.set(a.id, a.agent_status);
      this.since = Math.max(this.since, new Date(a.updated_at).getTime());
    }
    this.arm();
  }

  private arm(): void {
    if (this.stopped) return;
    this.timer = this.clock.setTimeout(() => {
      this.running = this.scan().finally(() => {
        this.running = null;
        this.arm();
      });
    }, this.intervalMs);
  }

  async scan(): Promise<void> {
    try {
      const rows = await this.store.agentsChangedSince(this.since);
      for (const a of rows) {
        const t = new Date(a.updated_at).getTime();
        if (t > this.since) this.since = t;
        const before = this.known.get(a.id);
        this.known.set(a.id, a.agent_status);
        if (a.agent_status === 'offline' && before !== undefined && before !== 'offline') {
          await this.notifier.notifySystem(a.team_id, 'agent_offline', {
            title: 'Agent went offline',
            message: `Agent ${a.display_name} lost its connection and did not come back within the grace period.`,
            agentId: a.id,
            dedupeKey: `agent_offline:${a.id}:${new Date(a.updated_at).toISOString()}`,
          });
        }
      }
    } catch (err) {
      this.logger.warn({ err }, 'agent offline scan failed');
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    await this.running;
  }
}
