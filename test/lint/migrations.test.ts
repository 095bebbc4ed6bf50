// Expand-then-contract (issue 33 §3): every migration's up() is readable by the previous release;
// a migration that would break it fails this check (src/persistence/migration-lint.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { lintMigration, upSql } from '../../src/persistence/migration-lint.js';

const DIR = new URL('../../src/persistence/migrations/', import.meta.url).pathname;

test('every migration is expand-only (or names itself a contract step)', () => {
  const files = readdirSync(DIR).filter((f) => /^Migration\d+_.*\.ts$/.test(f));
  assert.ok(files.length >= 20, `${files.length} migrations found`);
  const findings = files.flatMap((f) => lintMigration(f, readFileSync(join(DIR, f), 'utf8')));
  assert.deepEqual(findings, []);
  // the check sees the SQL: the first migration's up() creates tables
  assert.ok(upSql(readFileSync(join(DIR, files.sort()[0] as string), 'utf8')).some((s) => /create table/i.test(s)));
});

const migration = (up: string, extra = ''): string => `import { Migration } from '@mikro-orm/migrations';
${extra}
export class Migration29990101000000_x extends Migration {
  override up(): void {
    ${up}
  }

  override down(): void {
    this.addSql('alter table tasks drop column if exists x;');
  }
}
`;

test('a migration that would break the previous release fails, naming why', () => {
  const cases: Array<[string, RegExp]> = [
    ["this.addSql('alter table tasks drop column workflow_version;');", /drops a column/],
    ["this.addSql('drop table webhooks;');", /drops a table/],
    ["this.addSql('alter table tasks rename column task_status to status;');", /renames/],
    ["this.addSql('alter table workflows rename to flows;');", /renames/],
    ["this.addSql('alter table tasks alter column priority type bigint;');", /type/],
    ["this.addSql('alter table tasks alter column priority set not null;');", /NOT NULL/],
    ["this.addSql(`alter table tasks add column region text not null;`);", /without a default/],
  ];
  for (const [sql, why] of cases) {
    const f = lintMigration('x.ts', migration(sql));
    assert.equal(f.length, 1, sql);
    assert.match(f[0]?.rule ?? '', why, sql);
  }
});

test('expand steps pass; the down() is not checked; a named contract step passes', () => {
  assert.deepEqual(lintMigration('x.ts', migration("this.addSql('alter table tasks add column if not exists region text not null default \\'\\';');")), []);
  assert.deepEqual(lintMigration('x.ts', migration("this.addSql('alter table tasks add column region text;'); this.addSql('create index if not exists tasks_region_idx on tasks (region);');")), []);
  assert.deepEqual(lintMigration('x.ts', migration("this.addSql('alter table tasks drop column legacy;');", '// contract: legacy was last read by 0.1 (protocol 1), which MIN_PEER_PROTOCOL 2 no longer admits')), []);
});
