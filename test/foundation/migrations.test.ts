import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../src/shared/config.js';
import { createLogger } from '../../src/shared/logger.js';
import { startNode } from '../../src/main.js';
import { createTestDatabase } from '../helpers/pg.js';
import { migrationsList } from '../../src/persistence/migrations/index.js';

test('migrations run once on an empty PostgreSQL and are idempotent on a second start', async () => {
  const db = await createTestDatabase('mig');
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-mig-'));
  const config = loadConfig({}, { DATABASE_URL: db.url, GANTRY_DATA_DIR: dataDir, GANTRY_HTTP_PORT: 0, GANTRY_GRPC_PORT: 0, GANTRY_HTTP_HOST: '127.0.0.1' });
  const logger = createLogger('silent');
  try {
    const a = await startNode(config, { logger });
    assert.deepEqual(a.migrationsApplied, migrationsList.map((m) => m.name));
    await a.close();
    const b = await startNode(config, { logger });
    assert.deepEqual(b.migrationsApplied, []);
    assert.equal(b.installationId, a.installationId);
    await b.close();
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    const r = await c.query('select count(*)::int as n from mikro_orm_migrations');
    await c.end();
    assert.equal(r.rows[0].n, migrationsList.length);
  } finally {
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
