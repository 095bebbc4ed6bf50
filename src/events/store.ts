/**
 * SQL of the live-events features: webhooks and their delivery outbox, the outbox cursor,
 * notifications (the SSE read side over task_events is task-event-source.ts, re-exported here).
 * Every query takes the team id (team scope in the store layer); foreign rows are simply not found.
 */
import { randomBytes } from 'node:crypto';
import type { TaskEvent } from '../actors/ports.js';
import type { Database } from '../persistence/db.js';
import { inTx, q, iso, ts, json, type Q } from '../persistence/sql.js';
import { rowToEvent, type TaskEventRow } from '../persistence/task-rows.js';
import { isRecord, jsonArrayOf, type PgBigint, type PgTimestamp } from '../persistence/rows.js';
import { uuidv7 } from '../shared/ids.js';
import { audited } from '../persistence/audit.js';
import type { AuditNote } from '../shared/audit.js';
export { TaskEventSource } from './task-event-source.js';

export const WEBHOOK_EVENTS = ['task.completed', 'task.failed'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];
const isWebhookEvent = (x: unknown): x is WebhookEvent => (WEBHOOK_EVENTS as readonly unknown[]).includes(x);
export const WEBHOOK_EVENT_OF: Record<string, WebhookEvent | undefined> = { completed: 'task.completed', failed: 'task.failed' };

// ------------------------------------------------------------------------------------------
// webhooks

export interface WebhookRow {
  id: string;
  team_id: string;
  display_name: string;
  webhook_url: string;
  webhook_events: unknown;
  webhook_status: 'active' | 'disabled';
  signing_secret: string;
  created_by: string | null;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
}

export const webhookView = (r: WebhookRow, withSecret: boolean): Record<string, unknown> => ({
  id: r.id,
  display_name: r.display_name,
  webhook_url: r.webhook_url,
  webhook_events: jsonArrayOf(r.webhook_events, isWebhookEvent),
  webhook_status: r.webhook_status,
  ...(withSecret ? { signing_secret: r.signing_secret } : {}),
  created_at: iso(r.created_at),
  updated_at: iso(r.updated_at),
});

/** `dropped`: pending or retrying when its webhook was disabled; never sent (see dropDisabled). */
export const DELIVERY_STATUSES = ['pending', 'delivering', 'succeeded', 'failed', 'dropped'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];
export const DROPPED_ERROR = 'dropped: the webhook is disabled';

export interface DeliveryRow {
  id: string;
  webhook_id: string;
  team_id: string;
  task_event_id: PgBigint;
  task_id: string;
  event_type: WebhookEvent;
  body: string;
  delivery_status: DeliveryStatus;
  attempt: number;
  max_attempts: number;
  next_attempt_at: PgTimestamp | null;
  response_code: number | null;
  latency_ms: number | null;
  last_error: string | null;
  attempt_log: unknown;
  redelivery_of: string | null;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
  finished_at: PgTimestamp | null;
}

export const deliveryView = (r: DeliveryRow): Record<string, unknown> => ({
  id: r.id,
  webhook_id: r.webhook_id,
  task_id: r.task_id,
  event_type: r.event_type,
  delivery_status: r.delivery_status,
  attempt: Number(r.attempt),
  max_attempts: Number(r.max_attempts),
  response_code: r.response_code ?? null,
  latency_ms: r.latency_ms ?? null,
  error: r.last_error ?? null,
  next_attempt_at: r.delivery_status === 'pending' ? iso(r.next_attempt_at) : null,
  attempts: jsonArrayOf(r.attempt_log, isRecord),
  redelivery_of: r.redelivery_of ?? null,
  created_at: iso(r.created_at),
  updated_at: iso(r.updated_at),
  finished_at: iso(r.finished_at),
});

/** The body a receiver gets: exactly the spec's fields, serialized once and stored (signed bytes never change). */
export function deliveryBody(e: TaskEvent): string {
  const d = e.data as Record<string, unknown>;
  const type = WEBHOOK_EVENT_OF[e.type] ?? `task.${e.type}`;
  const timestamp = (e.type === 'completed' ? d.completed_at : d.timestamp) ?? new Date(e.createdAt).toISOString();
  return JSON.stringify({
    event_type: type,
    task_id: e.taskId,
    task_status: (d.status as string | undefined) ?? e.type,
    task_output: (d.output as Record<string, unknown> | undefined) ?? {},
    task_error: (d.error as string | undefined) ?? '',
    timestamp,
  });
}

/** One terminal event for the outbox writer, with its notification text (see Notifier.terminalNotice). */
export interface TerminalItem {
  e: TaskEvent;
  notice: TerminalNotice;
}

/** A terminal task notification; the message is the task's workflow slug followed by messageSuffix. */
export interface TerminalNotice {
  kind: string;
  title: string;
  messageSuffix: string;
  dedupeKey: string;
}

/**
 * Drops the pending deliveries (and those of a node that died mid-attempt) of disabled webhooks:
 * status dropped, finished, the reason in last_error; never sent. Narrowed to one webhook or one
 * delivery when given. Returns how many were dropped.
 */
async function dropDisabled(qq: Q, at: Date, webhookId: string | null = null, deliveryId: string | null = null): Promise<number> {
  const r = await qq(
    `update webhook_deliveries d
        set delivery_status = 'dropped', next_attempt_at = null, lease_until = null, last_error = ?, updated_at = ?, finished_at = ?
       from webhooks w
      where w.id = d.webhook_id and w.webhook_status = 'disabled'
        and (d.delivery_status = 'pending' or (d.delivery_status = 'delivering' and d.lease_until <= ?))
        and (?::uuid is null or d.webhook_id = ?::uuid) and (?::uuid is null or d.id = ?::uuid)
      returning d.id`,
    [DROPPED_ERROR, at, at, at, webhookId, webhookId, deliveryId, deliveryId],
  );
  return r.length;
}

export class EventsStore {
  constructor(private readonly db: Database) {}

  private get q(): Q {
    return q(this.db);
  }

  // --- webhooks
  async createWebhook(w: { teamId: string; displayName: string; url: string; events: WebhookEvent[]; createdBy: string | null }, audit?: AuditNote): Promise<string> {
    const id = uuidv7();
    const secret = `whsec_${randomBytes(32).toString('hex')}`;
    // created_at is database time: enqueue compares it with task_events.created_at
    await audited(this.db, audit, async (tq, record) => {
      await tq(`insert into webhooks (id, team_id, display_name, webhook_url, webhook_events, signing_secret, created_by) values (?, ?, ?, ?, ?::jsonb, ?, ?)`, [
      id,
      w.teamId,
      w.displayName,
      w.url,
      json(w.events),
      secret,
      w.createdBy,
      ]);
      await record({ targetId: id });
    });
    return id;
  }

  async listWebhooks(teamId: string, limit: number, offset: number): Promise<{ rows: WebhookRow[]; total: number }> {
    const rows = await this.q<WebhookRow>('select * from webhooks where team_id = ? order by created_at desc, id desc limit ? offset ?', [teamId, limit, offset]);
    const n = await this.q<{ n: number }>('select count(*)::int as n from webhooks where team_id = ?', [teamId]);
    return { rows, total: Number(n[0]?.n ?? 0) };
  }

  async getWebhook(teamId: string, id: string): Promise<WebhookRow | null> {
    return (await this.q<WebhookRow>('select * from webhooks where team_id = ? and id = ?', [teamId, id]))[0] ?? null;
  }

  async updateWebhook(
    teamId: string,
    id: string,
    p: { displayName?: string | undefined; url?: string | undefined; events?: WebhookEvent[] | undefined; status?: 'active' | 'disabled' | undefined },
    now: number,
    audit?: AuditNote,
  ): Promise<boolean> {
    const sets: string[] = ['updated_at = ?'];
    const params: unknown[] = [new Date(now)];
    if (p.displayName !== undefined) {
      sets.push('display_name = ?');
      params.push(p.displayName);
    }
    if (p.url !== undefined) {
      sets.push('webhook_url = ?');
      params.push(p.url);
    }
    if (p.events !== undefined) {
      sets.push('webhook_events = ?::jsonb');
      params.push(json(p.events));
    }
    if (p.status !== undefined) {
      sets.push('webhook_status = ?');
      params.push(p.status);
    }
    return audited(this.db, audit, async (tq, record) => {
      const r = await tq(`update webhooks set ${sets.join(', ')} where team_id = ? and id = ? returning id`, [...params, teamId, id]);
      if (r.length !== 1) return false;
      // "while disabled, deliveries are dropped, not queued": what waits for its (re)try goes now,
      // in the same transaction, so neither a re-enable nor a new URL ever sends it
      const dropped = p.status === 'disabled' ? await dropDisabled(tq, new Date(now), id) : 0;
      await record({ details: p.status !== undefined ? { webhook_status: p.status, ...(dropped > 0 ? { dropped_deliveries: dropped } : {}) } : {} });
      return true;
    });
  }

  async deleteWebhook(teamId: string, id: string, audit?: AuditNote): Promise<boolean> {
    return audited(this.db, audit, async (tq, record) => {
      const ok = (await tq('delete from webhooks where team_id = ? and id = ? returning id', [teamId, id])).length === 1;
      if (ok) await record();
      return ok;
    });
  }

  // --- the outbox
  /**
   * The outbox writer: for every terminal event of the batch, in ONE statement (one round trip,
   * atomic, no explicit transaction holding a pooled connection):
   *   - one delivery per active webhook of the event's team subscribed to it (idempotent: unique
   *     (webhook_id, task_event_id) + on conflict do nothing); disabled webhooks, and webhooks
   *     created after the event, get nothing; events without a webhook type (cancelled) get none;
   *   - the task's notification for the user who ran it, or for sk- runs (no user) the team's owner
   *     and admins (idempotent: unique (user_id, dedupe_key)).
   * Notification ids are the item's uuidv7 with the recipient's index in the last 6 hex digits, so
   * they stay time-ordered like ids minted one by one. Returns the number of new rows.
   */
  async enqueueTerminal(items: readonly TerminalItem[], now: number, maxAttempts: number): Promise<{ deliveries: number; notifications: number }> {
    if (items.length === 0) return { deliveries: 0, notifications: 0 };
    const rows = items.map(({ e, notice }) => {
      const type = WEBHOOK_EVENT_OF[e.type] ?? null;
      return {
        id: e.id,
        task_id: e.taskId,
        team_id: e.teamId,
        webhook_event: type,
        body: type ? deliveryBody(e) : null,
        created_at: new Date(e.createdAt).toISOString(),
        kind: notice.kind,
        title: notice.title,
        suffix: notice.messageSuffix,
        dedupe_key: notice.dedupeKey,
        nid: uuidv7(),
      };
    });
    const at = new Date(now);
    const r = await this.q<{ deliveries: number; notifications: number }>(
      `with ev as (
         select * from jsonb_to_recordset(?::jsonb)
           as x(id bigint, task_id uuid, team_id uuid, webhook_event text, body text, created_at timestamptz, kind text, title text, suffix text, dedupe_key text, nid text)
       ),
       d as (
         insert into webhook_deliveries (id, webhook_id, team_id, task_event_id, task_id, event_type, body, delivery_status, attempt, max_attempts, next_attempt_at, created_at, updated_at)
         select gen_random_uuid(), w.id, w.team_id, ev.id, ev.task_id, ev.webhook_event, ev.body, 'pending', 0, ?, ?, ?, ?
           from ev join webhooks w on w.team_id = ev.team_id
          where ev.webhook_event is not null and w.webhook_status = 'active' and w.webhook_events @> jsonb_build_array(ev.webhook_event) and w.created_at <= ev.created_at
         on conflict do nothing
         returning 1
       ),
       r as (
         select ev.*, t.workflow_slug, u.user_id, row_number() over (partition by ev.id order by u.user_id) - 1 as k
           from ev
           join tasks t on t.id = ev.task_id
           cross join lateral (
             select t.created_by_user_id as user_id where t.created_by_user_id is not null
             union
             select m.user_id from team_members m where t.created_by_user_id is null and m.team_id = ev.team_id and m.member_role in ('owner', 'admin')
           ) u
       ),
       n as (
         insert into notifications (id, team_id, user_id, notification_kind, title, message, task_id, agent_id, webhook_id, dedupe_key, created_at)
         select overlay(r.nid placing lpad(to_hex(r.k), 6, '0') from 31 for 6)::uuid, r.team_id, r.user_id, r.kind, r.title, r.workflow_slug || r.suffix, r.task_id, null, null, r.dedupe_key, ?
           from r
         on conflict do nothing
         returning 1
       )
       select (select count(*) from d)::int as deliveries, (select count(*) from n)::int as notifications`,
      [json(rows), maxAttempts, at, at, at, at],
    );
    return { deliveries: Number(r[0]?.deliveries ?? 0), notifications: Number(r[0]?.notifications ?? 0) };
  }

  /** Terminal events after the cursor (oldest first) and the database's notion of "settled" time. */
  async terminalEventsAfter(cursor: number, limit: number): Promise<{ events: TaskEvent[]; settledBefore: number }> {
    const settled = await this.q<{ s: PgTimestamp }>(`select now() - interval '30 seconds' as s`);
    const rows = await this.q<TaskEventRow>(`select * from task_events where id > ? and event_type in ('completed', 'failed', 'cancelled') order by id limit ?`, [cursor, limit]);
    return { events: rows.map(rowToEvent), settledBefore: ts(settled[0]?.s) ?? 0 };
  }

  async cursor(name: string): Promise<number> {
    const r = await this.q<{ last_event_id: PgBigint }>(
      `insert into event_cursors (cursor_name, last_event_id) values (?, coalesce((select max(id) from task_events), 0)) on conflict (cursor_name) do update set cursor_name = excluded.cursor_name returning last_event_id`,
      [name],
    );
    return Number(r[0]?.last_event_id ?? 0);
  }

  async advanceCursor(name: string, to: number): Promise<void> {
    await this.q('update event_cursors set last_event_id = greatest(last_event_id, ?), updated_at = now() where cursor_name = ?', [to, name]);
  }

  async inTx<T>(fn: (qq: Q) => Promise<T>): Promise<T> {
    return inTx(this.db, fn);
  }

  /**
   * Claims due deliveries (pending and due, or delivering with an expired lease: the node that
   * claimed them died) with FOR UPDATE SKIP LOCKED, so several nodes never send the same attempt.
   */
  async claimDue(now: number, leaseMs: number, limit: number): Promise<Array<DeliveryRow & { webhook_url: string; signing_secret: string }>> {
    return inTx(this.db, async (qq) => {
      // a delivery whose webhook is disabled is dropped, never claimed (one made pending by an
      // attempt that was in flight when the webhook was disabled, or a node of an older version)
      await dropDisabled(qq, new Date(now));
      const rows = await qq<DeliveryRow & { webhook_url: string; signing_secret: string }>(
        `with due as (
           select d.id from webhook_deliveries d join webhooks w on w.id = d.webhook_id and w.webhook_status = 'active'
            where ((d.delivery_status = 'pending' and d.next_attempt_at <= ?) or (d.delivery_status = 'delivering' and d.lease_until <= ?))
            order by d.next_attempt_at
            limit ?
            for update of d skip locked
         )
         update webhook_deliveries d
            set delivery_status = 'delivering', attempt = d.attempt + 1, lease_until = ?, updated_at = ?
           from due, webhooks w
          where d.id = due.id and w.id = d.webhook_id
          returning d.*, w.webhook_url, w.signing_secret`,
        [new Date(now), new Date(now), limit, new Date(now + leaseMs), new Date(now)],
      );
      return rows;
    });
  }

  /** Records an attempt's outcome: succeeded, failed for good, or pending again at nextAt. */
  async recordAttempt(id: string, o: { attempt: number; status: 'succeeded' | 'failed' | 'pending'; responseCode: number | null; latencyMs: number | null; error: string | null; startedAt: number; now: number; nextAt: number | null }): Promise<void> {
    const entry = { attempt: o.attempt, started_at: new Date(o.startedAt).toISOString(), response_code: o.responseCode, latency_ms: o.latencyMs, error: o.error };
    await this.q(
      `update webhook_deliveries set delivery_status = ?, response_code = ?, latency_ms = ?, last_error = ?, next_attempt_at = ?, lease_until = null,
          attempt_log = attempt_log || ?::jsonb, updated_at = ?, finished_at = ?
        where id = ? and delivery_status = 'delivering' and attempt = ?`,
      [o.status, o.responseCode, o.latencyMs, o.error, o.nextAt === null ? null : new Date(o.nextAt), json([entry]), new Date(o.now), o.status === 'pending' ? null : new Date(o.now), id, o.attempt],
    );
    // the webhook was disabled while this attempt was in flight: no retry
    if (o.status === 'pending') await dropDisabled(this.q, new Date(o.now), null, id);
  }

  /** Shutdown mid-attempt: give the attempt back (it did not count) so the next node sends it. */
  async releaseAttempt(id: string, attempt: number, now: number): Promise<void> {
    await this.q(`update webhook_deliveries set delivery_status = 'pending', attempt = attempt - 1, lease_until = null, next_attempt_at = ?, updated_at = ? where id = ? and delivery_status = 'delivering' and attempt = ?`, [
      new Date(now),
      new Date(now),
      id,
      attempt,
    ]);
  }

  async nextDueAt(): Promise<number | null> {
    const r = await this.q<{ t: PgTimestamp | null }>(
      `select min(case when delivery_status = 'pending' then next_attempt_at else lease_until end) as t from webhook_deliveries where delivery_status in ('pending', 'delivering')`,
    );
    return ts(r[0]?.t ?? null);
  }

  async listDeliveries(teamId: string, webhookId: string, status: string | undefined, limit: number, offset: number): Promise<{ rows: DeliveryRow[]; total: number }> {
    const where = ['team_id = ?', 'webhook_id = ?'];
    const params: unknown[] = [teamId, webhookId];
    if (status) {
      where.push('delivery_status = ?');
      params.push(status);
    }
    const rows = await this.q<DeliveryRow>(`select * from webhook_deliveries where ${where.join(' and ')} order by created_at desc, id desc limit ? offset ?`, [...params, limit, offset]);
    const n = await this.q<{ n: number }>(`select count(*)::int as n from webhook_deliveries where ${where.join(' and ')}`, params);
    return { rows, total: Number(n[0]?.n ?? 0) };
  }

  async getDelivery(teamId: string, webhookId: string, id: string): Promise<DeliveryRow | null> {
    return (await this.q<DeliveryRow>('select * from webhook_deliveries where team_id = ? and webhook_id = ? and id = ?', [teamId, webhookId, id]))[0] ?? null;
  }

  /** A new delivery of the same signed body (same event), with the full retry schedule. */
  async redeliver(d: DeliveryRow, now: number, maxAttempts: number, audit?: AuditNote): Promise<string> {
    const id = uuidv7();
    await audited(this.db, audit, async (tq, record) => {
      await tq(
      `insert into webhook_deliveries (id, webhook_id, team_id, task_event_id, task_id, event_type, body, delivery_status, attempt, max_attempts, next_attempt_at, redelivery_of, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?)`,
      [id, d.webhook_id, d.team_id, d.task_event_id, d.task_id, d.event_type, d.body, maxAttempts, new Date(now), d.redelivery_of ?? d.id, new Date(now), new Date(now)],
      );
      await record({ details: { delivery_id: d.id, new_delivery_id: id } });
    });
    return id;
  }

  // --- notifications
  /** Team members with one of the roles (admins + owner receive team-wide alerts). */
  async teamAdmins(qq: Q, teamId: string): Promise<string[]> {
    const rows = await qq<{ user_id: string }>(`select user_id from team_members where team_id = ? and member_role in ('owner', 'admin')`, [teamId]);
    return rows.map((r) => r.user_id);
  }

  async insertNotifications(
    qq: Q,
    n: { teamId: string; userIds: string[]; kind: string; title: string; message: string; taskId?: string | null; agentId?: string | null; webhookId?: string | null; dedupeKey: string | null; now: number },
  ): Promise<number> {
    let created = 0;
    for (const userId of new Set(n.userIds)) {
      const r = await qq(
        `insert into notifications (id, team_id, user_id, notification_kind, title, message, task_id, agent_id, webhook_id, dedupe_key, created_at)
         values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict do nothing returning id`,
        [uuidv7(), n.teamId, userId, n.kind, n.title, n.message, n.taskId ?? null, n.agentId ?? null, n.webhookId ?? null, n.dedupeKey, new Date(n.now)],
      );
      created += r.length;
    }
    return created;
  }

  async listNotifications(teamId: string, userId: string, unreadOnly: boolean, limit: number, offset: number): Promise<{ rows: NotificationRow[]; total: number; unread: number }> {
    const where = ['team_id = ?', 'user_id = ?', ...(unreadOnly ? ['not is_read'] : [])];
    const params = [teamId, userId];
    const rows = await this.q<NotificationRow>(`select * from notifications where ${where.join(' and ')} order by created_at desc, id desc limit ? offset ?`, [...params, limit, offset]);
    const n = await this.q<{ n: number; u: number }>(`select count(*)::int as n, count(*) filter (where not is_read)::int as u from notifications where ${where.join(' and ')}`, params);
    return { rows, total: Number(n[0]?.n ?? 0), unread: Number(n[0]?.u ?? 0) };
  }

  async markRead(teamId: string, userId: string, id: string, now: number, audit?: AuditNote): Promise<boolean> {
    return audited(this.db, audit, async (tq, record) => {
      const r = await tq('update notifications set is_read = true, read_at = coalesce(read_at, ?) where team_id = ? and user_id = ? and id = ? returning id', [new Date(now), teamId, userId, id]);
      if (r.length === 1) await record();
      return r.length === 1;
    });
  }

  async markAllRead(teamId: string, userId: string, now: number, audit?: AuditNote): Promise<number> {
    return audited(this.db, audit, async (tq, record) => {
      const r = await tq('update notifications set is_read = true, read_at = ? where team_id = ? and user_id = ? and not is_read returning id', [new Date(now), teamId, userId]);
      if (r.length > 0) await record({ details: { updated_count: r.length } });
      return r.length;
    });
  }

  /** Agents whose status changed since a time (the offline scanner). */
  async agentsChangedSince(since: number): Promise<Array<{ id: string; team_id: string; display_name: string; agent_status: string; updated_at: PgTimestamp }>> {
    return this.q(`select id, team_id, display_name, agent_status, updated_at from agents where updated_at > ? order by updated_at limit 5000`, [new Date(since)]);
  }
}

/** A `notifications` row (select *). */
export interface NotificationRow {
  id: string;
  team_id: string;
  user_id: string;
  notification_kind: string;
  title: string;
  message: string;
  task_id: string | null;
  agent_id: string | null;
  webhook_id: string | null;
  is_read: boolean;
  read_at: PgTimestamp | null;
  dedupe_key: string | null;
  created_at: PgTimestamp;
}

export const notificationView = (r: NotificationRow): Record<string, unknown> => ({
  id: r.id,
  notification_kind: r.notification_kind,
  title: r.title,
  message: r.message,
  task_id: r.task_id ?? null,
  agent_id: r.agent_id ?? null,
  webhook_id: r.webhook_id ?? null,
  is_read: r.is_read === true,
  read_at: iso(r.read_at),
  created_at: iso(r.created_at),
});
