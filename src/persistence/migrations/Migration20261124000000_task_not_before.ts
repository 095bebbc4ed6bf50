import { Migration } from '@mikro-orm/migrations';

/**
 * Retry backoff: a retry task created by a failure is not scheduled before `not_before`
 * (null = at once). Set when the retry row is inserted; read by the team scheduler.
 */
export class Migration20261124000000_task_not_before extends Migration {
  override up(): void {
    this.addSql('alter table tasks add column if not exists not_before timestamptz;');
  }

  override down(): void {
    this.addSql('alter table tasks drop column if exists not_before;');
  }
}
