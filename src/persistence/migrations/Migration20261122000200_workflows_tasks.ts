import { Migration } from '@mikro-orm/migrations';

export class Migration20261122000200_workflows_tasks extends Migration {
  override up(): void {
    this.addSql(`create table workflows (
      id uuid primary key,
      team_id uuid not null,
      workflow_slug text not null,
      display_name text not null,
      description text,
      tool_type text not null default 'comfyui',
      workflow_json jsonb not null,
      parameters jsonb not null default '[]',
      required_labels jsonb not null default '[]',
      task_timeout integer not null default 0,
      max_retries integer not null default 0,
      preferred_gpu text,
      default_dispatch_target text not null default 'agent',
      min_vram_gb double precision not null default 0,
      required_models jsonb not null default '[]',
      version integer not null default 1,
      workflow_status text not null default 'active',
      created_by uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );`);
    this.addSql('create unique index workflows_slug_uq on workflows (workflow_slug);');
    this.addSql('create index workflows_team_idx on workflows (team_id, created_at desc);');
    this.addSql(`create table workflow_snapshots (
      id uuid primary key,
      workflow_id uuid not null references workflows(id) on delete cascade,
      team_id uuid not null,
      workflow_version integer not null,
      definition jsonb not null,
      snapshot_note text,
      created_at timestamptz not null default now(),
      unique (workflow_id, workflow_version)
    );`);

    this.addSql(`create table tasks (
      id uuid primary key,
      team_id uuid not null,
      seq bigserial not null,
      workflow_id uuid not null,
      workflow_slug text not null,
      workflow_version integer not null,
      snapshot_id uuid,
      task_status text not null,
      dispatch_target text not null default 'agent',
      tool_type text not null default 'comfyui',
      agent_id uuid,
      parameters jsonb not null default '{}',
      resolved_workflow jsonb not null,
      input_files jsonb not null default '[]',
      progress jsonb,
      output jsonb,
      task_error text,
      attempt integer not null default 1,
      max_retries integer not null default 0,
      parent_task_id uuid,
      retry_task_id uuid,
      lease_epoch integer not null default 0,
      task_timeout_s integer not null default 0,
      required_labels jsonb not null default '[]',
      min_vram_gb double precision not null default 0,
      required_models jsonb not null default '[]',
      preferred_gpu text,
      created_by_user_id uuid,
      created_by_credential_id uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      queued_at timestamptz,
      started_at timestamptz,
      finished_at timestamptz,
      output_expires_at timestamptz,
      constraint tasks_status_ck check (task_status in ('pending','waiting','provisioning','queued','running','completed','failed','cancelled'))
    );`);
    this.addSql('create index tasks_team_created_idx on tasks (team_id, created_at desc);');
    this.addSql(`create index tasks_open_idx on tasks (team_id, seq) where task_status in ('pending','waiting','provisioning','queued','running');`);
    this.addSql('create index tasks_agent_idx on tasks (agent_id) where agent_id is not null;');
    this.addSql(`create table task_events (
      id bigserial primary key,
      task_id uuid not null,
      team_id uuid not null,
      event_type text not null,
      payload jsonb not null,
      created_at timestamptz not null default now()
    );`);
    this.addSql('create index task_events_task_idx on task_events (task_id, id);');

    this.addSql(`create table agents (
      id uuid primary key,
      team_id uuid not null,
      machine_id text not null,
      display_name text not null,
      agent_status text not null default 'offline',
      labels jsonb not null default '[]',
      gpu_type text,
      gpu_count integer not null default 0,
      vram_total_gb double precision not null default 0,
      gpus jsonb not null default '[]',
      models jsonb not null default '[]',
      custom_nodes jsonb not null default '[]',
      slots integer not null default 1,
      system_stats jsonb,
      current_task_id uuid,
      last_seen_at timestamptz,
      agent_version text,
      credential_id uuid,
      node_id text,
      session_id text,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      unique (team_id, machine_id)
    );`);
  }

  override down(): void {
    this.addSql('drop table if exists agents; drop table if exists task_events; drop table if exists tasks; drop table if exists workflow_snapshots; drop table if exists workflows;');
  }
}
