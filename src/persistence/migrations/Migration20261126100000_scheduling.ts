import { Migration } from '@mikro-orm/migrations';

/**
 * The scheduler's policy inputs (issue 30): a task's priority (1 highest .. 5, default 3), a
 * workflow's default priority for runs that give none, and per-credential scheduling settings
 * (fair-share weight, max_concurrent_tasks). Expand-only: a node of the previous version writes
 * tasks without a priority (the default 3 applies) and ignores the new table.
 */
export class Migration20261126100000_scheduling extends Migration {
  override up(): void {
    this.addSql(`alter table tasks add column if not exists priority smallint not null default 3;`);
    this.addSql(`alter table tasks add constraint tasks_priority_ck check (priority between 1 and 5);`);
    this.addSql(`alter table workflows add column if not exists default_priority smallint;`);
    this.addSql(`alter table workflows add constraint workflows_default_priority_ck check (default_priority is null or default_priority between 1 and 5);`);
    this.addSql(`create table if not exists credential_scheduling (
      credential_id uuid primary key references credentials(id) on delete cascade,
      team_id uuid not null,
      scheduling_weight double precision not null default 1 check (scheduling_weight > 0),
      max_concurrent_tasks integer check (max_concurrent_tasks is null or max_concurrent_tasks > 0),
      updated_at timestamptz not null default now()
    );`);
    this.addSql('create index if not exists credential_scheduling_team_idx on credential_scheduling (team_id);');
    // what an agent's executor runs (tool_type is a placement constraint); [] = any (an older agent)
    this.addSql(`alter table agents add column if not exists tool_types jsonb not null default '[]';`);
    // the fair-share ledger's seed: a team's tasks that held an agent recently
    this.addSql('create index if not exists tasks_team_finished_idx on tasks (team_id, finished_at) where queued_at is not null or started_at is not null;');
  }

  override down(): void {
    this.addSql('drop index if exists tasks_team_finished_idx;');
    this.addSql('drop table if exists credential_scheduling;');
    this.addSql('alter table agents drop column if exists tool_types;');
    this.addSql('alter table workflows drop constraint if exists workflows_default_priority_ck;');
    this.addSql('alter table workflows drop column if exists default_priority;');
    this.addSql('alter table tasks drop constraint if exists tasks_priority_ck;');
    this.addSql('alter table tasks drop column if exists priority;');
  }
}
