import { Migration } from '@mikro-orm/migrations';

/**
 * Live events (docs/api.md): webhooks, their delivery outbox (one row per (webhook, terminal
 * task event), claimed with FOR UPDATE SKIP LOCKED when next_attempt_at is due), the outbox cursor
 * over task_events, and the in-app notifications.
 */
export class Migration20261122000400_events extends Migration {
  override up(): void {
    this.addSql(`create table webhooks (
      id uuid primary key,
      team_id uuid not null,
      display_name text not null,
      webhook_url text not null,
      webhook_events jsonb not null,
      webhook_status text not null default 'active' check (webhook_status in ('active', 'disabled')),
      signing_secret text not null,
      created_by uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );`);
    this.addSql('create index webhooks_team_idx on webhooks (team_id, created_at desc, id);');

    this.addSql(`create table webhook_deliveries (
      id uuid primary key,
      webhook_id uuid not null references webhooks(id) on delete cascade,
      team_id uuid not null,
      task_event_id bigint not null,
      task_id uuid not null,
      event_type text not null,
      body text not null,
      delivery_status text not null default 'pending' check (delivery_status in ('pending', 'delivering', 'succeeded', 'failed')),
      attempt integer not null default 0,
      max_attempts integer not null default 5,
      next_attempt_at timestamptz,
      lease_until timestamptz,
      response_code integer,
      latency_ms integer,
      last_error text,
      attempt_log jsonb not null default '[]',
      redelivery_of uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      finished_at timestamptz
    );`);
    // exactly one delivery per (webhook, terminal event); redeliveries are extra rows
    this.addSql('create unique index webhook_deliveries_once_uq on webhook_deliveries (webhook_id, task_event_id) where redelivery_of is null;');
    this.addSql(`create index webhook_deliveries_due_idx on webhook_deliveries (next_attempt_at) where delivery_status in ('pending', 'delivering');`);
    this.addSql('create index webhook_deliveries_webhook_idx on webhook_deliveries (webhook_id, created_at desc, id desc);');

    this.addSql(`create table event_cursors (
      cursor_name text primary key,
      last_event_id bigint not null,
      updated_at timestamptz not null default now()
    );`);
    // start after history: a fresh installation does not deliver events that predate webhooks
    this.addSql(`insert into event_cursors (cursor_name, last_event_id) values ('outbox', coalesce((select max(id) from task_events), 0));`);

    this.addSql(`create table notifications (
      id uuid primary key,
      team_id uuid not null,
      user_id uuid not null,
      notification_kind text not null,
      title text not null,
      message text not null,
      task_id uuid,
      agent_id uuid,
      webhook_id uuid,
      is_read boolean not null default false,
      read_at timestamptz,
      dedupe_key text,
      created_at timestamptz not null default now()
    );`);
    this.addSql('create unique index notifications_dedupe_uq on notifications (user_id, dedupe_key);');
    this.addSql('create index notifications_user_idx on notifications (user_id, team_id, created_at desc, id desc);');
    this.addSql('create index notifications_unread_idx on notifications (user_id, team_id) where not is_read;');
  }

  override down(): void {
    this.addSql('drop table if exists notifications; drop table if exists event_cursors; drop table if exists webhook_deliveries; drop table if exists webhooks;');
  }
}
