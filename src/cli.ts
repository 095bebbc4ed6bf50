import { loadConfig, ConfigError } from './shared/config.js';
import { createLogger } from './shared/logger.js';

const usage = `gantry <command>

  serve      start a node (HTTP on GANTRY_HTTP_PORT, gRPC on GANTRY_GRPC_PORT)
  migrate    apply database migrations and exit
  agent      run a GPU agent (gantry agent --help)
`;

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    process.stdout.write(usage);
    return cmd === undefined ? 2 : 0;
  }
  if (cmd === 'agent') {
    const { runAgentCli } = await import('./agent/cli.js');
    return runAgentCli(rest);
  }
  let config;
  try {
    config = loadConfig(process.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`gantry: ${e.message}\n`);
      return 78;
    }
    throw e;
  }
  const logger = createLogger(config.LOG_LEVEL);
  if (cmd === 'migrate') {
    const { Database } = await import('./persistence/db.js');
    const db = await Database.open({ databaseUrl: config.DATABASE_URL, dataDir: config.GANTRY_DATA_DIR, poolMax: 2, logger });
    const applied = await db.migrate();
    logger.info({ applied }, 'migrations up to date');
    await db.close();
    return 0;
  }
  if (cmd === 'serve') {
    const { startNode } = await import('./main.js');
    let node;
    try {
      node = await startNode(config, { logger });
    } catch (e) {
      // a port another process holds: one line, like other configuration errors
      if (e instanceof ConfigError) {
        process.stderr.write(`gantry: ${e.message}\n`);
        return 78;
      }
      throw e;
    }
    await new Promise<void>((resolve) => {
      const stop = (sig: string): void => {
        logger.info({ signal: sig }, 'signal received');
        const hard = setTimeout(() => {
          logger.error('graceful shutdown timed out; exiting');
          process.exit(1);
        }, config.GANTRY_SHUTDOWN_TIMEOUT_MS);
        hard.unref();
        node.close().then(resolve, (e: unknown) => {
          logger.error({ err: e }, 'shutdown failed');
          process.exit(1);
        });
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
    });
    return 0;
  }
  process.stderr.write(`gantry: unknown command ${JSON.stringify(cmd)}\n${usage}`);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`gantry: ${(e as Error)?.stack ?? String(e)}\n`);
    process.exit(1);
  },
);
