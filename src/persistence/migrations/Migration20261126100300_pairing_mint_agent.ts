import { Migration } from '@mikro-orm/migrations';

/**
 * Device pairings record whether the confirmed pairing also mints an agent credential (ak-):
 * `POST /desktop/pair/start {agent_credential: false}` (the CLI) gets only its dk-. Expand-only: the
 * default true is what a node of the previous version does for every pairing.
 */
export class Migration20261126100300_pairing_mint_agent extends Migration {
  override up(): void {
    this.addSql('alter table device_pairings add column if not exists mint_agent boolean not null default true;');
  }

  override down(): void {
    this.addSql('alter table device_pairings drop column if exists mint_agent;');
  }
}
