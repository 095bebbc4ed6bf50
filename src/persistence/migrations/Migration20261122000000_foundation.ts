import { Migration } from '@mikro-orm/migrations';

export class Migration20261122000000_foundation extends Migration {
  override up(): void {
    this.addSql(`create table if not exists system_meta (
      key text primary key,
      value text not null,
      created_at timestamptz not null default now()
    );`);
  }

  override down(): void {
    this.addSql('drop table if exists system_meta;');
  }
}
