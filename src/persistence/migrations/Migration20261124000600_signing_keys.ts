import { Migration } from '@mikro-orm/migrations';

/**
 * Token signing keys shared by every node (src/identity/signing-keys.ts): Ed25519 private keys
 * encrypted with the deployment secret (AES-256-GCM), newest signs, older ones verify during their
 * grace period.
 */
export class Migration20261124000600_signing_keys extends Migration {
  override up(): void {
    this.addSql(`create table if not exists signing_keys (
      kid text primary key,
      private_enc text not null,
      created_at timestamptz not null default now()
    );`);
  }

  override down(): void {
    this.addSql('drop table if exists signing_keys;');
  }
}
