import { Migration } from '@mikro-orm/migrations';

/**
 * The audit log and single sign-on (OpenID Connect).
 *
 * audit_log: one row per management write (or credential use that changed something), appended in
 * the same transaction as the change (src/persistence/audit.ts). No foreign keys: an entry outlives
 * the team, user or credential it names. Kept GANTRY_AUDIT_RETENTION_DAYS days.
 *
 * oidc_login_states: the authorization requests in flight (state, nonce, PKCE verifier, the browser
 * binding cookie's hash), one row each, single use, short-lived: a callback may land on any node.
 * oidc_login_codes: the one-time code a finished login hands the browser or CLI, exchanged once for
 * tokens. user_identities: the (provider, subject) pairs linked to a user.
 */
export class Migration20261125000200_audit_sso extends Migration {
  override up(): void {
    this.addSql(`create table audit_log (
      id uuid primary key,
      team_id uuid not null,
      actor_kind text not null,
      actor_user_id uuid,
      actor_credential_id uuid,
      action text not null,
      target_type text not null,
      target_id text,
      request_id text,
      client_ip text,
      outcome text not null default 'succeeded',
      details jsonb not null default '{}'::jsonb,
      created_at timestamptz not null default now()
    );`);
    this.addSql('create index audit_log_team_idx on audit_log (team_id, created_at desc, id desc);');
    this.addSql('create index audit_log_created_idx on audit_log (created_at);');
    this.addSql(`create table oidc_login_states (
      state_hash text primary key,
      provider_id text not null,
      nonce text not null,
      code_verifier text not null,
      binding_hash text not null,
      return_to text,
      created_at timestamptz not null default now(),
      expires_at timestamptz not null
    );`);
    this.addSql(`create table oidc_login_codes (
      code_hash text primary key,
      user_id uuid not null references users(id) on delete cascade,
      provider_id text not null,
      created_at timestamptz not null default now(),
      expires_at timestamptz not null,
      used_at timestamptz
    );`);
    this.addSql(`create table user_identities (
      provider_id text not null,
      subject text not null,
      user_id uuid not null references users(id) on delete cascade,
      email_address text,
      created_at timestamptz not null default now(),
      last_login_at timestamptz,
      primary key (provider_id, subject)
    );`);
    this.addSql('create index user_identities_user_idx on user_identities (user_id);');
  }

  override down(): void {
    this.addSql('drop table if exists user_identities;');
    this.addSql('drop table if exists oidc_login_codes;');
    this.addSql('drop table if exists oidc_login_states;');
    this.addSql('drop table if exists audit_log;');
  }
}
