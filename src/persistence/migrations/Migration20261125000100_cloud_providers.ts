import { Migration } from '@mikro-orm/migrations';

/**
 * Hosted cloud providers (dispatch_target comfy_cloud, src/cloud):
 *
 * - cloud_providers: one row per (team, provider_slug) with the team's API key, stored only
 *   encrypted with the vault keyring (AES-256-GCM, bound to (team_id, provider_slug), see
 *   src/vault/keyring.ts cloudProviderAad); key_prefix is the first characters a person recognises
 *   the key by, key_id names the vault key it is under (rotation), last_checked_at/last_error the
 *   result of the last authenticated check against the provider.
 * - cloud_jobs: the provider's job (prompt_id) of a task, written as soon as the provider accepted
 *   it, so a node that takes over the dispatcher after a crash re-attaches to that job instead of
 *   submitting it again.
 */
export class Migration20261125000100_cloud_providers extends Migration {
  override up(): void {
    this.addSql(`create table cloud_providers (
      team_id uuid not null references teams(id) on delete cascade,
      provider_slug text not null,
      base_url text not null,
      key_enc text not null,
      key_id text not null,
      key_prefix text not null default '',
      max_concurrent_jobs integer not null default 1,
      provider_status text not null default 'active',
      last_checked_at timestamptz,
      last_error text not null default '',
      created_by uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      primary key (team_id, provider_slug)
    );`);
    this.addSql('create index cloud_providers_key_idx on cloud_providers (key_id);');
    this.addSql(`create table cloud_jobs (
      task_id uuid primary key references tasks(id) on delete cascade,
      team_id uuid not null,
      provider_slug text not null,
      prompt_id text not null,
      created_at timestamptz not null default now()
    );`);
    this.addSql('create index cloud_jobs_team_idx on cloud_jobs (team_id, provider_slug);');
  }

  override down(): void {
    this.addSql('drop table if exists cloud_jobs;');
    this.addSql('drop table if exists cloud_providers;');
  }
}
