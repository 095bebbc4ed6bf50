import { Migration } from '@mikro-orm/migrations';

/**
 * Idempotency keys of creating POSTs (Idempotency-Key header), per team, kept 24 h.
 * A row is written in the same statement as what the request created (the run's task insert),
 * so a key exists exactly when its response was committed. See docs/api.md.
 */
export class Migration20261124000100_idempotency extends Migration {
  override up(): void {
    this.addSql(`create table idempotency_keys (
      team_id uuid not null,
      idem_key text not null,
      fingerprint text not null,
      response_status integer not null,
      response_body jsonb not null,
      task_id uuid,
      created_at timestamptz not null default now(),
      primary key (team_id, idem_key)
    );`);
    this.addSql('create index idempotency_keys_created_idx on idempotency_keys (created_at);');
  }

  override down(): void {
    this.addSql('drop table if exists idempotency_keys;');
  }
}
