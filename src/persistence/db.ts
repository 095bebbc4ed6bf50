import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { MikroORM, type EntityManager, type Options } from '@mikro-orm/core';
import { PostgreSqlDriver, type EntityManager as SqlEntityManager } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { PGlite } from '@electric-sql/pglite';
import { PGliteDriver } from 'mikro-orm-pglite';
import type { Logger } from '../shared/logger.js';
import { AppError, DbError, dbErrorFrom, isRawDbError } from '../shared/errors.js';
import { ConfigError } from '../shared/config.js';
import { uuidv7 } from '../shared/ids.js';
import { hasActiveSpan, inSpan, SpanKind } from '../shared/tracing.js';
import { allEntities } from './entities/index.js';
import { migrationsList } from './migrations/index.js';

export type Em = SqlEntityManager;

/**
 * Tracing: every statement run through this layer (sql.ts, Database.execute) is a CLIENT span
 * when it runs inside a traced operation (an HTTP request, a task transition). Statements of
 * untraced background loops make no span (no orphan one-span traces). The statement text is
 * recorded with its `?` placeholders: parameter values never reach a span.
 */
export function traced<T>(statement: string, run: () => Promise<T>): Promise<T> {
  if (!hasActiveSpan()) return run();
  const verb = /^\s*([a-z]+)/i.exec(statement)?.[1]?.toUpperCase() ?? 'QUERY';
  return inSpan(`pg ${verb}`, { kind: SpanKind.CLIENT, attributes: { 'db.system.name': 'postgresql', 'db.operation.name': verb, 'db.query.text': statement.length > 2000 ? `${statement.slice(0, 2000)}...` : statement } }, run);
}

/** Retry-After (seconds) of a 503 `database_unavailable`. */
export const DB_RETRY_AFTER_S = 5;

/** Socket errors of a connection to the server that is refused, reset or gone. */
const CONNECTION_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN']);
/** SQLSTATEs meaning "the server is not there or not accepting us now" (class 08 but 08P01, shutdowns, too many connections). */
const CONNECTION_SQLSTATES = new Set(['08000', '08001', '08003', '08004', '08006', '08007', '57P01', '57P02', '57P03', '53300']);
/** Messages of the pg driver and of knex's pool when the server is unreachable. */
const CONNECTION_MESSAGES = [
  /connection terminated/i,
  /connection (?:ended|closed) unexpectedly/i,
  /client has encountered a connection error/i,
  /client was closed and is not queryable/i,
  /cannot use a pool after calling end/i,
  /timeout acquiring a connection/i,
  /timeout exceeded when trying to connect/i,
  /connect ECONNREFUSED/i,
];

/**
 * True when e (or its cause) says the database server cannot be reached: a refused or reset
 * socket, a shutdown or "cannot connect now" SQLSTATE, a terminated connection, a pool acquire
 * timeout. A client-made error (08P01 from a NUL byte, 22P02...) is not one.
 */
export function isConnectionError(e: unknown, depth = 0): boolean {
  if (!(e instanceof Error) || depth > 4) return false;
  const o = e as unknown as Record<string, unknown>;
  const code = typeof o.code === 'string' ? o.code : typeof o.sqlState === 'string' ? o.sqlState : '';
  if (CONNECTION_ERRNOS.has(code) || CONNECTION_SQLSTATES.has(code)) return true;
  if (e.name === 'KnexTimeoutError') return true;
  // the driver's message may be prefixed with the formatted query: only its tail is the driver's own
  const tail = e.message.length > 300 ? e.message.slice(-300) : e.message;
  if (!isRawDbError(e) && CONNECTION_MESSAGES.some((r) => r.test(tail))) return true;
  const agg = (o as { errors?: unknown }).errors;
  if (Array.isArray(agg) && agg.some((x) => isConnectionError(x, depth + 1))) return true;
  return isConnectionError(o.cause, depth + 1);
}

export const databaseUnavailable = (): AppError =>
  new AppError('unavailable', 'database_unavailable', 'the database is unavailable; retry later', { retryAfterS: DB_RETRY_AFTER_S });

/**
 * The one place where errors of the database layer are normalised. A connection-level failure
 * becomes AppError unavailable/database_unavailable (503 with Retry-After at the edge); an error
 * of the PostgreSQL driver becomes a DbError (SQLSTATE, condition, table, constraint and the
 * statement's shape: never its parameters, the driver's message or `detail`). Errors the caller
 * threw itself (AppError, its own failures) pass through untouched.
 */
export function normaliseDbError(e: unknown, statement?: string): unknown {
  if (e instanceof AppError || e instanceof DbError) return e;
  if (isConnectionError(e)) return databaseUnavailable();
  if (isRawDbError(e)) return dbErrorFrom(e, statement);
  return e;
}

export interface DatabaseOptions {
  databaseUrl: string | undefined;
  dataDir: string;
  poolMax: number;
  logger: Logger;
  /** Create the database named by databaseUrl when it does not exist (GANTRY_DB_CREATE); otherwise open refuses. */
  createDatabase?: boolean;
}

/** The database name in a postgres:// URL (its path), as PostgreSQL will see it. */
function databaseName(url: string): string {
  try {
    return decodeURIComponent(new URL(url).pathname.replace(/^\//, '')) || 'postgres';
  } catch {
    return '(unparsable)';
  }
}

/**
 * PostgreSQL through MikroORM 6.6. DATABASE_URL set: the real server (pool of poolMax).
 * Unset: embedded PostgreSQL (PGlite) under <dataDir>/pg, one session (knex pool of 1 serialises
 * transactions), data kept across restarts.
 */
export class Database {
  private constructor(
    readonly orm: MikroORM,
    readonly embedded: boolean,
    private readonly logger: Logger,
    private readonly pglite?: PGlite,
  ) {}

  /** True from the first connection-level failure until the next statement that succeeds. */
  private outage = false;

  /** Whether the last statement found the database unreachable (cleared by the next success). */
  get unavailable(): boolean {
    return this.outage;
  }

  /**
   * A failed statement's error, normalised (normaliseDbError). The first connection-level failure
   * of an outage is logged (once, not once per request); callers answer 503 and log nothing more.
   */
  failed(e: unknown, statement?: string): unknown {
    const n = normaliseDbError(e, statement);
    if (n instanceof AppError && n.code === 'database_unavailable' && !this.outage) {
      this.outage = true;
      const o = e as { code?: unknown; name?: unknown } | null;
      this.logger.error({ db_error: typeof o?.code === 'string' ? o.code : typeof o?.name === 'string' ? o.name : 'unknown' }, 'database unavailable: answering 503 database_unavailable until it is reachable again');
    }
    return n;
  }

  /** A statement succeeded: ends an outage (logged once). */
  succeeded(): void {
    if (!this.outage) return;
    this.outage = false;
    this.logger.info('database reachable again');
  }

  static async open(o: DatabaseOptions): Promise<Database> {
    const common: Partial<Options> = {
      entities: allEntities,
      extensions: [Migrator],
      migrations: { migrationsList, tableName: 'mikro_orm_migrations', transactional: true, allOrNothing: true, silent: true },
      discovery: { warnWhenNoEntities: false },
      allowGlobalContext: false,
      debug: false,
      forceUtcTimezone: true,
      ignoreUndefinedInQuery: true,
      // never create a missing database behind the user's back (see open)
      ensureDatabase: false,
    };
    let orm: MikroORM;
    let embedded = false;
    if (o.databaseUrl) {
      // knex's own warnings ("Connection Error: ..." once per dropped connection during an outage)
      // go to the node's logger at debug: the outage itself is logged once by failed()
      const knexLog =
        (level: 'warn' | 'debug') =>
        (m: unknown): void => {
          const text = typeof m === 'string' ? m : String(m);
          o.logger[level === 'debug' || text.startsWith('Connection Error') ? 'debug' : 'warn']({ component: 'knex' }, text);
        };
      orm = await MikroORM.init({
        ...common,
        driver: PostgreSqlDriver,
        clientUrl: o.databaseUrl,
        pool: { min: 0, max: o.poolMax },
        driverOptions: { log: { warn: knexLog('warn'), error: knexLog('warn'), deprecate: knexLog('warn'), debug: knexLog('debug') } },
      } as Options);
      // A DATABASE_URL naming a database that does not exist is refused (a typo must not split the
      // data into a fresh database) unless creation was asked for. The migrator would otherwise
      // create it on its first call.
      try {
        await orm.em.getConnection().execute('select 1');
      } catch (e) {
        if ((e as { code?: string }).code !== '3D000') {
          await orm.close(true);
          throw e;
        }
        const name = databaseName(o.databaseUrl);
        if (!o.createDatabase) {
          await orm.close(true);
          throw new ConfigError(`DATABASE_URL names database ${JSON.stringify(name)}, which does not exist; create it, or set GANTRY_DB_CREATE=true (or pass --create-db) to let gantry create it`);
        }
        await orm.schema.ensureDatabase();
        o.logger.info({ database: name }, 'database created (GANTRY_DB_CREATE)');
      }
    } else {
      embedded = true;
      const dir = resolve(o.dataDir, 'pg');
      mkdirSync(dir, { recursive: true });
      const pglite = await PGlite.create(dir);
      orm = await MikroORM.init({ ...common, driver: PGliteDriver, dbName: 'postgres', driverOptions: { connection: { pglite: () => pglite } } } as Options);
      return new Database(orm, embedded, o.logger, pglite);
    }
    return new Database(orm, embedded, o.logger);
  }

  /** A fresh unit of work; never share one across requests or actor turns. */
  em(): Em {
    return this.orm.em.fork() as unknown as Em;
  }

  /** Applies pending checked-in migrations; returns the names applied (empty when up to date). */
  async migrate(): Promise<string[]> {
    const migrator = this.orm.getMigrator();
    const applied = await migrator.up();
    const names = applied.map((m) => m.name);
    if (names.length) this.logger.info({ migrations: names }, 'migrations applied');
    return names;
  }

  async execute<T = Record<string, unknown>>(sql: string, params: unknown[] = [], em?: EntityManager): Promise<T[]> {
    const e = (em ?? this.orm.em) as unknown as Em;
    try {
      const rows = (await traced(sql, () => e.getConnection().execute(sql, params as never[], 'all'))) as T[];
      this.succeeded();
      return rows;
    } catch (err) {
      throw this.failed(err, sql);
    }
  }

  /** Reads (or creates on first boot) a value in system_meta. */
  async metaValue(key: string, create: () => string): Promise<string> {
    const rows = await this.execute<{ value: string }>(
      `insert into system_meta (key, value) values (?, ?) on conflict (key) do update set key = excluded.key returning value`,
      [key, create()],
    );
    const v = rows[0]?.value;
    if (v === undefined) throw new Error(`system_meta ${key} unavailable`);
    return v;
  }

  async installationId(): Promise<string> {
    return this.metaValue('installation_id', () => uuidv7());
  }

  /** A 32-byte secret generated once per installation and kept in the database (hex). */
  async secret(name: string): Promise<Buffer> {
    return Buffer.from(await this.metaValue(`secret:${name}`, () => randomBytes(32).toString('hex')), 'hex');
  }

  async ping(): Promise<boolean> {
    try {
      await this.execute('select 1 as ok');
      return true;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await this.orm.close(true);
    if (this.pglite && !this.pglite.closed) await this.pglite.close();
  }
}
