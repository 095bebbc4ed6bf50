import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Config } from './shared/config.js';
import { createLogger, type Logger } from './shared/logger.js';
import { Database } from './persistence/db.js';
import { HttpEdge, type RouteDef } from './edge/http.js';
import { systemRoutes } from './edge/routes/system.js';
import { debugRoutes } from './edge/routes/debug.js';
import type { Authenticator } from './edge/principal.js';
import { unauthorized } from './shared/errors.js';

export interface GantryNode {
  config: Config;
  logger: Logger;
  db: Database;
  httpPort: number;
  baseUrl: string;
  installationId: string;
  migrationsApplied: string[];
  /** Every registered HTTP route (the auth-matrix test walks them all). */
  routes(): ReadonlyArray<RouteDef>;
  /** Graceful stop: stop accepting, finish in-flight work (bounded), close the database. */
  close(): Promise<void>;
}

export interface StartOptions {
  logger?: Logger;
}

/** Until the identity module is wired, only public routes are reachable. */
const publicOnly: Authenticator = {
  authenticate: async (_req, auth) => {
    if (auth.kinds === 'public') return null;
    throw unauthorized('credential_missing', 'authentication required');
  },
};

/** The composition root: the only place that knows every layer. */
export async function startNode(config: Config, opts: StartOptions = {}): Promise<GantryNode> {
  const logger = opts.logger ?? createLogger(config.LOG_LEVEL);
  const dataDir = resolve(config.GANTRY_DATA_DIR);
  mkdirSync(dataDir, { recursive: true });

  const db = await Database.open({ databaseUrl: config.DATABASE_URL, dataDir, poolMax: config.GANTRY_DB_POOL_MAX, logger });
  const migrationsApplied = await db.migrate();
  const installationId = await db.installationId();
  logger.info({ installation_id: installationId, embedded: db.embedded, migrations_applied: migrationsApplied.length }, 'database ready');

  const edge = new HttpEdge({
    host: config.GANTRY_HTTP_HOST,
    port: config.GANTRY_HTTP_PORT,
    basePath: '/api/v1',
    maxBodyBytes: config.GANTRY_MAX_BODY_BYTES,
    logger,
    authenticator: publicOnly,
  });
  edge.addAll(
    systemRoutes({
      config,
      ready: async () => {
        const dbOk = await db.ping();
        return { ready: dbOk && !edge.isDraining(), checks: { database: dbOk, accepting: !edge.isDraining() } };
      },
    }),
  );
  if (config.GANTRY_DEBUG_ROUTES) edge.addAll(debugRoutes());
  const http = await edge.listen();
  const baseUrl = `http://127.0.0.1:${http.port}/api/v1`;
  logger.info({ http_port: http.port, base_url: baseUrl }, 'listening');

  let closing: Promise<void> | null = null;
  return {
    config,
    logger,
    db,
    httpPort: http.port,
    baseUrl,
    installationId,
    migrationsApplied,
    routes: () => http.routes(),
    close() {
      closing ??= (async () => {
        logger.info('shutting down');
        await http.shutdown(config.GANTRY_SHUTDOWN_TIMEOUT_MS);
        await db.close();
        logger.info('stopped');
      })();
      return closing;
    },
  };
}
