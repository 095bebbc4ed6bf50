import { Migration } from '@mikro-orm/migrations';

/**
 * Usage accounting (docs/api.md "Usage and GPU budgets"):
 * - task_attempts: one row per attempt of a task (a retry is a new task, so a new row), written in
 *   the same statement as the attempt's terminal transition (src/persistence/task-store.ts), keyed
 *   by (task_id, attempt) so a repeated write changes nothing. The aggregations of GET /usage read
 *   a team's rows of a time range (task_attempts_team_finished_idx), a credential budget a
 *   credential's rows of the month (task_attempts_credential_idx).
 * - usage_budgets: an optional monthly GPU-hour budget per team (credential_id null) or per
 *   credential of the team; at most one of each (the unique expression index).
 * - usage_monthly: the GPU-seconds of a team's attempts per calendar month (UTC), credential (the
 *   nil UUID for runs without one), workflow and GPU type, added to in the same statement as the
 *   attempt rows, so the budget gate of a run and the /metrics counter read a few rows instead of
 *   summing attempts.
 * Expand-only (new tables): a node of the previous version neither reads nor writes them.
 */
export class Migration20261126100100_usage extends Migration {
  override up(): void {
    this.addSql(`create table if not exists task_attempts (
      task_id uuid not null,
      attempt integer not null,
      team_id uuid not null,
      workflow_id uuid not null,
      workflow_slug text not null,
      workflow_version integer not null,
      credential_id uuid,
      user_id uuid,
      agent_id uuid,
      dispatch_target text not null,
      tool_type text not null,
      gpu_type text,
      gpu_count integer not null,
      outcome text not null,
      gpu_source text not null,
      created_at timestamptz not null,
      queued_at timestamptz,
      started_at timestamptz,
      finished_at timestamptz not null,
      queue_wait_s double precision not null,
      provisioning_s double precision not null,
      run_s double precision not null,
      gpu_seconds double precision not null,
      recorded_at timestamptz not null default now(),
      primary key (task_id, attempt),
      constraint task_attempts_outcome_ck check (outcome in ('completed','failed','cancelled'))
    );`);
    this.addSql('create index if not exists task_attempts_team_finished_idx on task_attempts (team_id, finished_at);');
    this.addSql('create index if not exists task_attempts_credential_idx on task_attempts (credential_id, finished_at) where credential_id is not null;');
    this.addSql(`create table if not exists usage_monthly (
      team_id uuid not null,
      credential_id uuid not null,
      month date not null,
      workflow_id uuid not null,
      gpu_type text not null,
      gpu_seconds double precision not null,
      attempt_count integer not null,
      primary key (team_id, month, credential_id, workflow_id, gpu_type)
    );`);
    this.addSql(`create table if not exists usage_budgets (
      id uuid primary key,
      team_id uuid not null,
      credential_id uuid,
      gpu_hours double precision not null check (gpu_hours >= 0),
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );`);
    this.addSql(`create unique index if not exists usage_budgets_scope_uq on usage_budgets (team_id, coalesce(credential_id, '00000000-0000-0000-0000-000000000000'::uuid));`);
  }

  override down(): void {
    this.addSql('drop table if exists usage_budgets;');
    this.addSql('drop table if exists usage_monthly;');
    this.addSql('drop table if exists task_attempts;');
  }
}
