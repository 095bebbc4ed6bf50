/**
 * Expand-then-contract, checked (docs/architecture.md "Rolling upgrades"): during a rolling upgrade
 * nodes of the previous release run against the schema the new release migrated, so a migration's
 * up() may only add what the previous release ignores. Refused in up(): dropping or renaming a table
 * or column, changing a column's type, making a column NOT NULL, adding a NOT NULL column without a
 * default. A contract step (removing what no supported release uses any more) says so explicitly with
 * a `// contract: <why no supported release needs it>` comment in the migration, which a reviewer
 * reads; the check then lets it pass. test/lint/migrations.test.ts runs this on every migration.
 */

export interface MigrationFinding {
  file: string;
  rule: string;
  sql: string;
}

const RULES: Array<{ rule: string; re: RegExp }> = [
  { rule: 'drops a table (the previous release still reads it)', re: /\bdrop\s+table\b/i },
  { rule: 'drops a column (the previous release still reads or writes it)', re: /\bdrop\s+column\b/i },
  { rule: 'renames a table or column (the previous release uses the old name)', re: /\brename\s+(column\s+)?\w+\s+to\b|\brename\s+to\b/i },
  { rule: "changes a column's type (the previous release writes the old type)", re: /\balter\s+column\s+\w+\s+(set\s+data\s+)?type\b/i },
  { rule: "makes a column NOT NULL (the previous release's inserts omit it)", re: /\balter\s+column\s+\w+\s+set\s+not\s+null\b/i },
];

/** `add column x <type> not null` without a default: the previous release's inserts fail. */
const ADD_NOT_NULL = /\badd\s+column\s+(if\s+not\s+exists\s+)?(\w+)\s+([^,;]*?)\bnot\s+null\b([^,;]*)/gi;

/** The SQL a migration's up() adds (the string literals inside it), in order. */
export function upSql(source: string): string[] {
  const start = source.search(/\bup\s*\(\s*\)\s*:\s*(void|Promise<void>)\s*\{/);
  if (start < 0) return [];
  const end = source.slice(start).search(/\n\s*(override\s+)?(async\s+)?down\s*\(/);
  const body = end < 0 ? source.slice(start) : source.slice(start, start + end);
  const out: string[] = [];
  for (const m of body.matchAll(/'((?:[^'\\]|\\.)*)'|`((?:[^`\\]|\\.)*)`|"((?:[^"\\]|\\.)*)"/g)) out.push(m[1] ?? m[2] ?? m[3] ?? '');
  return out;
}

/** What in the migration's up() would break a node of the previous release (empty: expand-only). */
export function lintMigration(file: string, source: string): MigrationFinding[] {
  if (/\/\/\s*contract:\s*\S/.test(source)) return [];
  const found: MigrationFinding[] = [];
  for (const sql of upSql(source)) {
    for (const { rule, re } of RULES) if (re.test(sql)) found.push({ file, rule, sql });
    for (const m of sql.matchAll(ADD_NOT_NULL)) {
      const rest = `${m[3] ?? ''} ${m[4] ?? ''}`;
      if (!/\bdefault\b/i.test(rest) && !/\bgenerated\b/i.test(rest)) found.push({ file, rule: 'adds a NOT NULL column without a default (the previous release inserts without it)', sql });
    }
  }
  return found;
}
