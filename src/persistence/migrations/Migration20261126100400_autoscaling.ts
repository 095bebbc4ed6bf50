import { Migration } from '@mikro-orm/migrations';

/**
 * Container services gain autoscaling (an extension): `min_replicas`, `max_replicas` (set: the
 * service scales between them; null: the fixed `replica_count`), `target_inflight_per_replica` and
 * `idle_timeout_s` (scale to zero). Expand-only: nullable columns a node of the previous version
 * neither reads nor writes.
 */
export class Migration20261126100400_autoscaling extends Migration {
  override up(): void {
    this.addSql(`alter table container_services
      add column if not exists min_replicas integer,
      add column if not exists max_replicas integer,
      add column if not exists target_inflight_per_replica integer,
      add column if not exists idle_timeout_s integer;`);
  }

  override down(): void {
    this.addSql(`alter table container_services
      drop column if exists min_replicas,
      drop column if exists max_replicas,
      drop column if exists target_inflight_per_replica,
      drop column if exists idle_timeout_s;`);
  }
}
