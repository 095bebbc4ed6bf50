import { Migration } from '@mikro-orm/migrations';

/**
 * The PostgreSQL fence of cluster members. A node inserts its member row when it joins; the node
 * that declares a member dead (or the member itself on a graceful leave) sets fenced_at. Every task
 * write of a node in cluster mode carries `exists (member row, not fenced)`, so a paused or
 * partitioned node's late writes match nothing once the others took over its actors.
 */
export class Migration20261124000500_cluster_members extends Migration {
  override up(): void {
    this.addSql(`create table if not exists cluster_members (
      member_id text primary key,
      node_id text not null,
      address text not null,
      joined_at timestamptz not null default now(),
      fenced_at timestamptz
    );`);
  }

  override down(): void {
    this.addSql('drop table if exists cluster_members;');
  }
}
