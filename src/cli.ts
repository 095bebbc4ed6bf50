import { mkdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { loadConfig, ConfigError, type Config } from './shared/config.js';
import { createLogger } from './shared/logger.js';

/**
 * `gantry <command>`: a small hand parser (no CLI dependency). Every command answers -h/--help
 * with its usage and exit 0 doing nothing else; -V/--version prints the package version.
 * Exit codes: 0 done, 1 unexpected failure, 2 usage error, 78 refused to start (configuration,
 * busy port, data dir in use, missing database): one line on stderr.
 */

const usage = `gantry <command> [options]

  serve      start a node (HTTP on GANTRY_HTTP_PORT, gRPC on GANTRY_GRPC_PORT)
  migrate    apply database migrations and exit
  agent      run a GPU agent (gantry agent --help)
  vault rotate  re-encrypt every credential vault secret with the active key (GANTRY_VAULT_KEYS) and exit
  version    print the version (also -V, --version)
  help       print this help (also -h, --help; gantry <command> --help for one command)

Configuration comes from the environment (see README.md, Configuration).
`;

const commandUsage: Record<'serve' | 'migrate', string> = {
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

const isHelp = (a: string): boolean => a === '-h' || a === '--help';
const isVersion = (a: string): boolean => a === '-V' || a === '--version';

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version?: string };
  return `gantry ${pkg.version ?? 'unknown'}\n`;
}

class UsageError extends Error {}

/** serve/migrate options; null when help or version was printed. */
function parseServeArgs(cmd: 'serve' | 'migrate', args: string[]): { createDb: boolean } | null {
  let createDb = false;
  for (const a of args) {
    if (isHelp(a)) {
      process.stdout.write(commandUsage[cmd]);
      return null;
    }
    if (isVersion(a)) {
      process.stdout.write(version());
      return null;
    }
  }
  for (const a of args) {
    if (a === '--create-db') createDb = true;
    else throw new UsageError(`gantry ${cmd}: unknown ${a.startsWith('-') ? 'option' : 'argument'} ${JSON.stringify(a)}\n\n${commandUsage[cmd]}`);
  }
  return { createDb };
}

function configFrom(createDb: boolean): Config {
  return loadConfig(process.env, createDb ? { GANTRY_DB_CREATE: true } : {});
}

async function migrate(config: Config): Promise<number> {
  const logger = createLogger(config.LOG_LEVEL);
  const { lockDataDir } = await import('./shared/startup.js');
  const { Database } = await import('./persistence/db.js');
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
async function vaultRotate(config: Config): Promise<number> {
  const logger = createLogger(config.LOG_LEVEL);
  const { Database } = await import('./persistence/db.js');
  const { VaultKeyring } = await import('./vault/keyring.js');
  const { VaultStore } = await import('./vault/store.js');
  const { deploymentSecret } = await import('./identity/signing-keys.js');
  const dataDir = resolve(config.GANTRY_DATA_DIR);
  const db = await Database.open({ databaseUrl: config.DATABASE_URL, dataDir, poolMax: 2, logger, createDatabase: false });
  try {
    await db.migrate();
    const keyring = VaultKeyring.fromConfig({ keys: config.GANTRY_VAULT_KEYS, fallbackSecret: deploymentSecret(config.GANTRY_SECRET_KEY, dataDir, logger) });
    const n = await new VaultStore(db, keyring).rotate();
    const { CloudProviderStore } = await import('./cloud/store.js');
    const k = await new CloudProviderStore(db, keyring).rotate();
    process.stdout.write(`re-encrypted ${n} vault credential(s) and ${k} cloud provider key(s) with key ${keyring.kids()[0] ?? ''}\n`);
  } finally {
    await db.close();
  }
  return 0;
}

async function serve(config: Config): Promise<number> {
  const logger = createLogger(config.LOG_LEVEL);
  const { startNode } = await import('./main.js');
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

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === undefined) {
    process.stderr.write(usage);
    return 2;
  }
  if (isHelp(cmd) || cmd === 'help') {
    const topic = cmd === 'help' ? rest[0] : undefined;
    if (topic === 'serve' || topic === 'migrate') process.stdout.write(commandUsage[topic]);
    else if (topic === 'agent') {
      const { agentUsage } = await import('./agent/main.js');
      process.stdout.write(agentUsage());
    } else process.stdout.write(usage);
    return 0;
  }
  if (isVersion(cmd) || cmd === 'version') {
    process.stdout.write(version());
    return 0;
  }
  try {
    if (cmd === 'agent') {
      if (rest.some(isVersion)) {
        process.stdout.write(version());
        return 0;
      }
      const { runAgentCli } = await import('./agent/cli.js');
      return await runAgentCli(rest);
    }
    if (cmd === 'vault') {
      if (rest[0] !== 'rotate' || rest.length !== 1) throw new UsageError('usage: gantry vault rotate\n');
      return await vaultRotate(configFrom(false));
    }
    if (cmd === 'serve' || cmd === 'migrate') {
      const opts = parseServeArgs(cmd, rest);
      if (opts === null) return 0;
      const config = configFrom(opts.createDb);
      return cmd === 'serve' ? await serve(config) : await migrate(config);
    }
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(e.message);
      return 2;
    }
    if (e instanceof ConfigError) {
      process.stderr.write(`gantry: ${e.message}\n`);
      return 78;
    }
    throw e;
  }
  process.stderr.write(`gantry: unknown command ${JSON.stringify(cmd)}\n\n${usage}`);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`gantry: ${(e as Error)?.stack ?? String(e)}\n`);
    process.exit(1);
  },
);
