import { Migration } from '@mikro-orm/migrations';

/**
 * The credential vault (src/vault): secrets a team's external container services inject into
 * outbound requests as one header. The value is stored only encrypted (AES-256-GCM, bound to
 * (team_id, id), see src/vault/keyring.ts); key_id names the key it is under, so a rotation finds
 * the rows still under an older key; value_hint is the last 4 characters of a long secret (or '').
 */
export class Migration20261124000800_vault extends Migration {
  override up(): void {
    this.addSql(`create table vault_credentials (
      id uuid primary key,
      team_id uuid not null references teams(id) on delete cascade,
      display_name text not null,
      header_name text not null,
      secret_enc text not null,
      key_id text not null,
      value_hint text not null default '',
      created_by uuid,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      constraint vault_credentials_team_name_key unique (team_id, display_name)
    );`);
    this.addSql('create index vault_credentials_team_idx on vault_credentials (team_id, created_at desc, id);');
    this.addSql('create index vault_credentials_key_idx on vault_credentials (key_id);');
  }

  override down(): void {
    this.addSql('drop table if exists vault_credentials;');
  }
}
