import { Migration } from '@mikro-orm/migrations';

/**
 * Files: staged uploads (inputs, model files and custom node packages between presign and use),
 * the team model registry, the custom node registry, and multipart uploads in flight.
 * See docs/api.md.
 */
export class Migration20261122000500_files extends Migration {
  override up(): void {
    this.addSql(`create table staged_files (
      file_key text primary key,
      team_id uuid not null,
      purpose text not null,
      file_name text not null,
      content_type text not null,
      file_size bigint not null,
      created_by_user_id uuid,
      created_by_credential_id uuid,
      created_at timestamptz not null default now(),
      expires_at timestamptz not null,
      constraint staged_files_purpose_ck check (purpose in ('input','model','node'))
    );`);
    this.addSql('create index staged_files_expires_idx on staged_files (expires_at);');
    this.addSql('create index staged_files_team_idx on staged_files (team_id, created_at desc);');

    this.addSql(`create table models (
      id uuid primary key,
      team_id uuid not null,
      display_name text not null,
      model_type text not null,
      model_path text not null,
      model_status text not null default 'active',
      storage_key text not null,
      file_size bigint not null,
      sha256 text not null,
      created_by uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      constraint models_status_ck check (model_status in ('active','disabled'))
    );`);
    this.addSql('create unique index models_team_path_uq on models (team_id, model_path);');
    this.addSql('create index models_team_created_idx on models (team_id, created_at desc);');

    this.addSql(`create table custom_nodes (
      id uuid primary key,
      team_id uuid not null,
      display_name text not null,
      package_name text not null,
      node_version text not null,
      node_status text not null default 'active',
      storage_key text not null,
      file_size bigint not null,
      sha256 text not null,
      created_by uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      constraint custom_nodes_status_ck check (node_status in ('active','disabled'))
    );`);
    this.addSql('create unique index custom_nodes_team_pkg_uq on custom_nodes (team_id, package_name);');
    this.addSql('create index custom_nodes_team_created_idx on custom_nodes (team_id, created_at desc);');

    this.addSql(`create table multipart_uploads (
      upload_id text primary key,
      team_id uuid not null,
      storage_key text not null,
      user_id uuid,
      file_size bigint not null,
      part_size bigint not null,
      part_count integer not null,
      created_at timestamptz not null default now(),
      expires_at timestamptz not null
    );`);
    this.addSql('create index multipart_uploads_key_idx on multipart_uploads (storage_key);');
    this.addSql('create index multipart_uploads_expires_idx on multipart_uploads (expires_at);');
    this.addSql(`create index tasks_output_sweep_idx on tasks (finished_at) where output_expires_at is null and finished_at is not null;`);
  }

  override down(): void {
    this.addSql('drop index if exists tasks_output_sweep_idx; drop table if exists multipart_uploads; drop table if exists custom_nodes; drop table if exists models; drop table if exists staged_files;');
  }
}
