import { Migration } from '@mikro-orm/migrations';

/**
 * Container services gain `session_affinity` (sticky sessions: {mode: cookie} or {mode: header,
 * header_name}; null = none). Expand-only: a nullable column a node of the previous version
 * neither reads nor writes.
 */
export class Migration20261126100200_session_affinity extends Migration {
  override up(): void {
    this.addSql('alter table container_services add column if not exists session_affinity jsonb;');
  }

  override down(): void {
    this.addSql('alter table container_services drop column if exists session_affinity;');
  }
}
