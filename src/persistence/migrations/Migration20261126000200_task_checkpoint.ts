import { Migration } from '@mikro-orm/migrations';

/**
 * Training checkpoints kept across attempts (nerfstudio resume): the object key of the latest
 * checkpoint an agent committed for the task, and its training step. A retry task copies its
 * parent's, and the next assignment names it. Expand-only (nullable columns): a node of the
 * previous version neither reads nor writes them.
 */
export class Migration20261126000200_task_checkpoint extends Migration {
  override up(): void {
    this.addSql('alter table tasks add column if not exists checkpoint_key text, add column if not exists checkpoint_step integer;');
  }

  override down(): void {
    this.addSql('alter table tasks drop column if exists checkpoint_key, drop column if exists checkpoint_step;');
  }
}
