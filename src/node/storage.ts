import { mkdirSync } from 'node:fs';
import type { Config } from '../shared/config.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import { assertPortFree, lockDataDir } from '../shared/startup.js';
import { Database } from '../persistence/db.js';
import { deploymentSecret } from '../identity/signing-keys.js';
import { createObjectStore, type ObjectStore } from '../storage/index.js';
import type { Lifecycle } from './lifecycle.js';
import type { NodeSettings, PublicUrl } from './settings.js';

/**
 * The start-up checks run before anything is touched (no migration, no key): busy ports, data dir
 * in use. Then the data dir is locked until the node stops, and its deployment secret read (or
 * made) once: GANTRY_SECRET_KEY, else the data dir's own.
 */
export async function claimDataDir(life: Lifecycle, d: { settings: NodeSettings; secretKey: string | undefined; logger: Logger }): Promise<{ deploymentSecret: string }> {
  const { grpc, http, dataDir } = d.settings;
  await assertPortFree('GANTRY_GRPC_PORT', grpc.host, grpc.port);
  await assertPortFree('GANTRY_HTTP_PORT', http.host, http.port);
  mkdirSync(dataDir, { recursive: true });
  await life.open(
    () => lockDataDir(dataDir),
    (lock) => lock.release(),
  );
  return { deploymentSecret: deploymentSecret(d.secretKey, dataDir, d.logger) };
}

export interface Storage {
  db: Database;
  migrationsApplied: string[];
  installationId: string;
  objectStore: ObjectStore;
}

/** The database (opened, migrated) and the object store (its URL-signing secret is in the database). */
export async function openStorage(life: Lifecycle, d: { config: Config; settings: NodeSettings; publicUrl: PublicUrl; clock: Clock; logger: Logger }): Promise<Storage> {
  const { config, logger } = d;
  const db = await life.open(
    () =>
      Database.open({
        databaseUrl: config.DATABASE_URL,
        dataDir: d.settings.dataDir,
        poolMax: config.GANTRY_DB_POOL_MAX,
        logger,
        createDatabase: config.GANTRY_DB_CREATE,
        acquireTimeoutMs: config.GANTRY_DB_ACQUIRE_TIMEOUT_MS,
        statementTimeoutMs: config.GANTRY_DB_STATEMENT_TIMEOUT_MS,
      }),
    (db) => db.close(),
  );
  const migrationsApplied = await db.migrate();
  const installationId = await db.installationId();
  logger.info({ installation_id: installationId, embedded: db.embedded, migrations_applied: migrationsApplied.length }, 'database ready');
  const objectStore: ObjectStore = createObjectStore({
    storage: config.GANTRY_STORAGE,
    dataDir: d.settings.dataDir,
    publicBaseUrl: d.publicUrl.origin(),
    secret: await db.secret('storage-url-signing'),
    s3: { endpoint: d.settings.s3Endpoint, region: config.S3_REGION, accessKeyId: config.S3_ACCESS_KEY_ID, secretAccessKey: config.S3_SECRET_ACCESS_KEY },
    clock: d.clock,
  });
  return { db, migrationsApplied, installationId, objectStore };
}
