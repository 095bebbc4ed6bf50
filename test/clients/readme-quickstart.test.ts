/**
 * README's Quick start sample outputs match the code: the number of migrations in the start-up log
 * line is the number of registered migrations (a new migration without a README update fails here).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { migrationsList } from '../../src/persistence/migrations/index.js';

const root = new URL('../..', import.meta.url).pathname;

test('the start-up sample names as many migrations as the node applies', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const n = /"migrations":\[\.\.\.(\d+) names\.\.\.\]/.exec(readme)?.[1];
  assert.equal(Number(n), migrationsList.length, 'README Quick start step 0: the migration count');
});
