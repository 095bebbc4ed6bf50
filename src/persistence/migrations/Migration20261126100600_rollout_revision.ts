import { Migration } from '@mikro-orm/migrations';

/**
 * Rolling updates of container services: each instance records the spec revision it was started
 * with (a hash of image, env, port, health path and GPUs; '' for instances placed before). The
 * rollout's state and the spec to roll back to live in the service's status_detail. Expand-only:
 * a node of the previous version neither reads nor writes the column (its default fills it).
 */
export class Migration20261126100600_rollout_revision extends Migration {
  override up(): void {
    this.addSql(`alter table container_instances add column if not exists spec_revision text not null default '';`);
  }

  override down(): void {
    this.addSql(`alter table container_instances drop column if exists spec_revision;`);
  }
}
