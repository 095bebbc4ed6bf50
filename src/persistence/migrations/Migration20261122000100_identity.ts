import { Migration } from '@mikro-orm/migrations';

/** Identity: users, teams, members, invitations, refresh tokens, credentials, device pairing, one-time tokens, email outbox. */
export class Migration20261122000100_identity extends Migration {
  override up(): void {
    this.addSql(`create table users (
      id uuid primary key,
      email_address text not null,
      email_normalized text not null unique,
      password_hash text not null,
      first_name text not null,
      last_name text not null,
      display_name text not null,
      email_verified_at timestamptz,
      session_version integer not null default 0,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );`);
    this.addSql(`create table teams (
      id uuid primary key,
      display_name text not null,
      owner_id uuid not null references users(id),
      is_personal boolean not null default false,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      deleted_at timestamptz
    );`);
    this.addSql(`create index teams_owner_idx on teams (owner_id) where deleted_at is null;`);
    this.addSql(`create table team_members (
      team_id uuid not null references teams(id) on delete cascade,
      user_id uuid not null references users(id) on delete cascade,
      member_role text not null check (member_role in ('owner', 'admin', 'member')),
      created_at timestamptz not null default now(),
      primary key (team_id, user_id)
    );`);
    this.addSql(`create index team_members_user_idx on team_members (user_id);`);
    this.addSql(`create unique index team_members_one_owner on team_members (team_id) where member_role = 'owner';`);
    this.addSql(`create table invitations (
      id uuid primary key,
      team_id uuid not null references teams(id) on delete cascade,
      email_address text not null,
      email_normalized text not null,
      member_role text not null check (member_role in ('admin', 'member')),
      token_hash text not null unique,
      invited_by uuid references users(id) on delete set null,
      invitation_status text not null default 'pending' check (invitation_status in ('pending', 'accepted', 'revoked')),
      expires_at timestamptz not null,
      accepted_by uuid references users(id) on delete set null,
      accepted_at timestamptz,
      created_at timestamptz not null default now()
    );`);
    this.addSql(`create index invitations_team_idx on invitations (team_id, created_at);`);
    this.addSql(`create table refresh_tokens (
      id uuid primary key,
      family_id uuid not null,
      user_id uuid not null references users(id) on delete cascade,
      token_hash text not null unique,
      created_at timestamptz not null default now(),
      expires_at timestamptz not null,
      rotated_at timestamptz,
      revoked_at timestamptz
    );`);
    this.addSql(`create index refresh_tokens_family_idx on refresh_tokens (family_id);`);
    this.addSql(`create index refresh_tokens_user_idx on refresh_tokens (user_id);`);
    this.addSql(`create table credentials (
      id uuid primary key,
      credential_type text not null check (credential_type in ('integration', 'agent', 'device')),
      team_id uuid not null references teams(id) on delete cascade,
      user_id uuid references users(id) on delete set null,
      display_name text not null,
      credential_prefix text not null,
      secret_hash text not null unique,
      linked_to uuid,
      created_at timestamptz not null default now(),
      expires_at timestamptz,
      revoked_at timestamptz,
      last_used_at timestamptz
    );`);
    this.addSql(`create index credentials_team_idx on credentials (team_id, created_at);`);
    this.addSql(`create index credentials_linked_idx on credentials (linked_to) where linked_to is not null;`);
    this.addSql(`create table device_pairings (
      id uuid primary key,
      user_code text not null,
      poll_secret_hash text not null,
      device_name text not null,
      pairing_status text not null default 'pending' check (pairing_status in ('pending', 'confirmed', 'delivered')),
      user_id uuid references users(id) on delete cascade,
      team_id uuid references teams(id) on delete cascade,
      expires_at timestamptz not null,
      last_polled_at timestamptz,
      confirmed_at timestamptz,
      delivered_at timestamptz,
      created_at timestamptz not null default now()
    );`);
    this.addSql(`create unique index device_pairings_code_pending on device_pairings (user_code) where pairing_status = 'pending';`);
    this.addSql(`create table one_time_tokens (
      id uuid primary key,
      token_type text not null check (token_type in ('password_reset', 'email_verification')),
      user_id uuid not null references users(id) on delete cascade,
      token_hash text not null unique,
      expires_at timestamptz not null,
      used_at timestamptz,
      created_at timestamptz not null default now()
    );`);
    this.addSql(`create table email_outbox (
      id uuid primary key,
      email_kind text not null,
      to_address text not null,
      subject text not null,
      body_text text not null,
      created_at timestamptz not null default now(),
      next_attempt_at timestamptz not null default now(),
      attempts integer not null default 0,
      sent_at timestamptz,
      last_error text
    );`);
    this.addSql(`create index email_outbox_pending_idx on email_outbox (next_attempt_at) where sent_at is null;`);
  }

  override down(): void {
    for (const t of ['email_outbox', 'one_time_tokens', 'device_pairings', 'credentials', 'refresh_tokens', 'invitations', 'team_members', 'teams', 'users'])
      this.addSql(`drop table if exists ${t};`);
  }
}
