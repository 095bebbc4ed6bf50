import { mkdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { loadConfig, type Config } from '../shared/config.js';
import { createLogger } from '../shared/logger.js';

/**
 * The server-side commands of `gantry` (src/cli/main.ts parses the command line): serve, migrate,
 * vault rotate.
 */

export const commandUsage: Record<'serve' | 'migrate', string> = {
  serve: `gantry serve [--create-db]

  Starts a node: HTTP on GANTRY_HTTP_HOST:GANTRY_HTTP_PORT, agent gRPC on GANTRY_GRPC_HOST:GANTRY_GRPC_PORT,
  PostgreSQL at DATABASE_URL (embedded under GANTRY_DATA_DIR when unset). Applies pending migrations.
  Stops gracefully on SIGTERM/SIGINT.

  --create-db   create the database named by DATABASE_URL if it does not exist (GANTRY_DB_CREATE=true)
  -h, --help    print this help and exit
`,
  migrate: `gantry migrate [--create-db]

  Applies pending database migrations to DATABASE_URL (embedded under GANTRY_DATA_DIR when unset) and exits.

  --create-db   create the database named by DATABASE_URL if it does not exist (GANTRY_DB_CREATE=true)
  -h, --help    print this help and exit
`,
};

export function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
  return `gantry ${pkg.version ?? 'unknown'}\n`;
}

export function configFrom(createDb: boolean): Config {
  return loadConfig(process.env, createDb ? { GANTRY_DB_CREATE: true } : {});
}

export async function migrate(config: Config): Promise<number> {
  const logger = createLogger(config.LOG_LEVEL);
  const { lockDataDir } = await import('../shared/startup.js');
  const { Database } = await import('../persistence/db.js');
  // the embedded database lives in the data dir: never migrate it under a running node
  const dataDir = resolve(config.GANTRY_DATA_DIR);
  let lock: { release(): void } | null = null;
  if (!config.DATABASE_URL) {
    mkdirSync(dataDir, { recursive: true });
    lock = lockDataDir(dataDir);
  }
  try {
    const db = await Database.open({ databaseUrl: config.DATABASE_URL, dataDir, poolMax: 2, logger, createDatabase: config.GANTRY_DB_CREATE });
    try {
      const applied = await db.migrate();
      logger.info({ applied }, 'migrations up to date');
    } finally {
      await db.close();
    }
  } finally {
    lock?.release();
  }
  return 0;
}

/** `gantry vault rotate`: every vault secret not under the active key is re-encrypted with it. */
export async function vaultRotate(config: Config): Promise<number> {
  const logger = createLogger(config.LOG_LEVEL);
  const { Database } = await import('../persistence/db.js');
  const { VaultKeyring } = await import('../vault/keyring.js');
  const { VaultStore } = await import('../vault/store.js');
  const { deploymentSecret } = await import('../identity/signing-keys.js');
  const dataDir = resolve(config.GANTRY_DATA_DIR);
  const db = await Database.open({ databaseUrl: config.DATABASE_URL, dataDir, poolMax: 2, logger, createDatabase: false });
  try {
    await db.migrate();
    const keyring = VaultKeyring.fromConfig({ keys: config.GANTRY_VAULT_KEYS, fallbackSecret: deploymentSecret(config.GANTRY_SECRET_KEY, dataDir, logger) });
    const n = await new VaultStore(db, keyring).rotate();
    process.stdout.write(`re-encrypted ${n} vault credential(s) with key ${keyring.kids()[0] ?? ''}\n`);
  } finally {
    await db.close();
  }
  return 0;
}

export async function serve(config: Config): Promise<number> {
  const logger = createLogger(config.LOG_LEVEL);
  const { startNode } = await import('../main.js');
  const node = await startNode(config, { logger });
  await new Promise<void>((done) => {
    const stop = (sig: string): void => {
      logger.info({ signal: sig }, 'signal received');
      const hard = setTimeout(() => {
        logger.error('graceful shutdown timed out; exiting');
        process.exit(1);
      }, config.GANTRY_SHUTDOWN_TIMEOUT_MS);
      hard.unref();
      node.close().then(done, (e: unknown) => {
        logger.error({ err: e }, 'shutdown failed');
        process.exit(1);
      });
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  return 0;
}
