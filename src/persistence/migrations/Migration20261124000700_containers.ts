import { Migration } from '@mikro-orm/migrations';

/**
 * Container services (src/domain/containers): the team's long-running services and the replicas
 * placed on its agents. The service row is written only by its container-service actor (state,
 * placement); instances carry the agent's last report (state, health). Agents record which
 * container runtime they offer.
 */
export class Migration20261124000700_containers extends Migration {
  override up(): void {
    this.addSql(`alter table agents add column if not exists container_runtime text not null default '';`);
    this.addSql(`alter table agents add column if not exists tunnel boolean not null default false;`);
    this.addSql(`create table container_services (
      id uuid primary key,
      team_id uuid not null references teams(id) on delete cascade,
      service_slug text not null,
      display_name text not null,
      service_type text not null,
      service_status text not null,
      service_desc text not null default '',
      docker_image text not null default '',
      exposed_port integer not null default 0,
      health_path text not null default '',
      env_config jsonb not null default '[]',
      volume_config jsonb not null default '[]',
      required_labels jsonb not null default '[]',
      gpu_count integer not null default 0,
      replica_count integer not null default 1,
      usage_prompt text not null default '',
      openapi_url text not null default '',
      external_url text not null default '',
      external_auth_credential_id uuid,
      status_detail jsonb not null default '{}',
      created_by uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      unique (team_id, service_slug)
    );`);
    this.addSql(`create table container_instances (
      id uuid primary key,
      service_id uuid not null references container_services(id) on delete cascade,
      team_id uuid not null,
      agent_id uuid not null,
      instance_status text not null,
      healthy boolean not null default false,
      instance_error text not null default '',
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );`);
    this.addSql('create index container_instances_service on container_instances (service_id);');
    this.addSql('create index container_instances_agent on container_instances (agent_id);');
  }

  override down(): void {
    this.addSql('drop table if exists container_instances;');
    this.addSql('drop table if exists container_services;');
    this.addSql('alter table agents drop column if exists container_runtime;');
    this.addSql('alter table agents drop column if exists tunnel;');
  }
}
