import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { MikroORM, type Options } from '@mikro-orm/core';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { PGlite } from '@electric-sql/pglite';
import { PGliteDriver } from 'mikro-orm-pglite';
import type { Logger } from '../shared/logger.js';
import { AppError, DbError, dbErrorFrom, isRawDbError } from '../shared/errors.js';
import { ConfigError } from '../shared/config.js';
import { uuidv7 } from '../shared/ids.js';
import { hasActiveSpan, inSpan, SpanKind } from '../shared/tracing.js';
import { migrationsList } from './migrations/index.js';
import { HostRotation, needsRotation, parseMultiHostUrl } from './pg-hosts.js';

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

/** How long after the server-side statement_timeout a statement without any answer has its connection destroyed. */
export const STATEMENT_GUARD_MARGIN_MS = 500;

/** What the statement guard needs of a pg Client (node-postgres). */
interface PgClientLike {
  query: (...args: unknown[]) => unknown;
  connection?: { stream?: { destroy(err?: Error): void } };
  __knex__disposed?: unknown;
}

/**
 * Bounds every statement of one pg connection: when a statement has no answer after ms (not even
 * the server's own statement_timeout cancel, so the server or the path to it hangs), the
 * connection is marked disposed for knex's pool and its socket destroyed, which fails the statement
 * (and whatever else waits on that connection) with "Connection terminated", a connection error:
 * 503 database_unavailable. A destroyed connection never commits a transaction it had open.
 */
function guardStatements(conn: PgClientLike, ms: number): void {
  const query = conn.query.bind(conn);
  conn.query = (...args: unknown[]): unknown => {
    const cbAt = args.findIndex((a) => typeof a === 'function');
    if (cbAt < 0) return query(...args);
    const cb = args[cbAt] as (...r: unknown[]) => void;
    const timer = setTimeout(() => {
      conn.__knex__disposed = `no answer to a statement in ${ms} ms`;
      conn.connection?.stream?.destroy(new Error(`statement guard: no answer in ${ms} ms`));
    }, ms);
    timer.unref();
    const wrapped = [...args];
    wrapped[cbAt] = (...r: unknown[]): void => {
      clearTimeout(timer);
      cb(...r);
    };
    return query(...wrapped);
  };
}

/** Retry-After (seconds) of a 503 `database_unavailable`. */
export const DB_RETRY_AFTER_S = 5;

/** Socket errors of a connection to the server that is refused, reset or gone. */
const CONNECTION_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN']);
/** SQLSTATEs meaning "the server is not there or not accepting us now" (class 08 but 08P01, shutdowns, too many connections). */
const CONNECTION_SQLSTATES = new Set(['08000', '08001', '08003', '08004', '08006', '08007', '57P01', '57P02', '57P03', '53300']);
/** 57014 query_canceled: the server's statement_timeout (GANTRY_DB_STATEMENT_TIMEOUT_MS) ended a statement: the database did not answer in time. */
const TIMEOUT_SQLSTATES = new Set(['57014']);
/** Messages of the pg driver and of knex's pool when the server is unreachable. */
const CONNECTION_MESSAGES = [
  /connection terminated/i,
  /connection (?:ended|closed) unexpectedly/i,
  /client has encountered a connection error/i,
  /client was closed and is not queryable/i,
  /cannot use a pool after calling end/i,
  /timeout acquiring a connection/i,
  /timeout exceeded when trying to connect/i,
  /^timeout expired$/i, // pg: connectionTimeoutMillis passed while connecting
  /statement guard: no answer/i,
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
  if (CONNECTION_ERRNOS.has(code) || CONNECTION_SQLSTATES.has(code) || TIMEOUT_SQLSTATES.has(code)) return true;
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
  /**
   * DATABASE_URL only (GANTRY_DB_ACQUIRE_TIMEOUT_MS): the longest wait for a pool connection,
   * opening one included; then 503 database_unavailable. 0 or absent: knex's 60 s.
   */
  acquireTimeoutMs?: number;
  /**
   * DATABASE_URL only (GANTRY_DB_STATEMENT_TIMEOUT_MS): PostgreSQL cancels a statement running
   * longer (statement_timeout), and a statement that gets no answer at all (the server hangs or the
   * network black-holes it) has its connection destroyed STATEMENT_GUARD_MARGIN_MS later; both
   * answer 503 database_unavailable. Migrations run without it. 0 or absent: no bound.
   */
  statementTimeoutMs?: number;
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
 * PostgreSQL through MikroORM 6.6, used as the migrator and the connection layer only (no
 * entities: the stores run SQL through sql.ts). DATABASE_URL set: the real server (pool of poolMax).
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
    let migrationOrm: (() => Promise<MikroORM>) | undefined;
    if (o.databaseUrl) {
      // knex's own warnings ("Connection Error: ..." once per dropped connection during an outage)
      // go to the node's logger at debug: the outage itself is logged once by failed()
      const knexLog =
        (level: 'warn' | 'debug') =>
        (m: unknown): void => {
          const text = typeof m === 'string' ? m : String(m);
          o.logger[level === 'debug' || text.startsWith('Connection Error') ? 'debug' : 'warn']({ component: 'knex' }, text);
        };
      const acquireMs = o.acquireTimeoutMs ?? 0;
      const statementMs = o.statementTimeoutMs ?? 0;
      const guardMs = statementMs + STATEMENT_GUARD_MARGIN_MS;
      // a libpq-style multi-host URL (h1:p1,h2:p2, target_session_attrs=read-write): pg-hosts.ts
      const multi = parseMultiHostUrl(o.databaseUrl);
      const rotation = multi && needsRotation(multi) ? new HostRotation(multi) : null;
      const clientUrl = rotation && multi ? multi.singleHostUrl : o.databaseUrl;
      type Done = (err: Error | null, conn: PgClientLike) => void;
      const checkHost = (conn: PgClientLike, done: Done): void => {
        if (!rotation) return done(null, conn);
        rotation.check(conn as unknown as Parameters<HostRotation['check']>[0]).then(
          () => done(null, conn),
          (e: unknown) => done(e instanceof Error ? e : new Error(String(e)), conn),
        );
      };
      const afterCreate =
        statementMs > 0 || rotation
          ? (conn: PgClientLike, done: Done): void => {
              if (statementMs > 0) guardStatements(conn, guardMs);
              checkHost(conn, done);
            }
          : undefined;
      orm = await MikroORM.init({
        ...common,
        driver: PostgreSqlDriver,
        clientUrl,
        pool: { min: 0, max: o.poolMax, ...(afterCreate ? { afterCreate } : {}) },
        driverOptions: {
          ...(acquireMs > 0 ? { acquireConnectionTimeout: acquireMs } : {}),
          connection: {
            keepAlive: true,
            ...(rotation ? { stream: rotation.stream } : {}),
            ...(acquireMs > 0 ? { connectionTimeoutMillis: acquireMs } : {}),
            ...(statementMs > 0 ? { statement_timeout: statementMs } : {}),
          },
          log: { warn: knexLog('warn'), error: knexLog('warn'), deprecate: knexLog('warn'), debug: knexLog('debug') },
        },
      } as Options);
      if (statementMs > 0 || acquireMs > 0) {
        // migrations (index builds, backfills) may take longer than a request's statement: they run on
        // a short-lived connection of their own without these bounds
        migrationOrm = () => MikroORM.init({ ...common, driver: PostgreSqlDriver, clientUrl, pool: { min: 0, max: 1, ...(rotation ? { afterCreate: checkHost } : {}) }, ...(rotation ? { driverOptions: { connection: { stream: rotation.stream } } } : {}) } as Options);
      }
      // A DATABASE_URL naming a database that does not exist is refused (a typo must not split the
      // data into a fresh database) unless creation was asked for. The migrator would otherwise
      // create it on its first call.
      try {
        // with several hosts, the first ones may be down or standbys: each refusal moves the
        // rotation on, so try once per host before giving up
        for (let attempt = 1; ; attempt++) {
          try {
            await orm.em.getConnection().execute('select 1');
            break;
          } catch (e) {
            if (!rotation || attempt >= rotation.url.hosts.length || !isConnectionError(e)) throw e;
          }
        }
      } catch (e) {
        if ((e as { code?: string }).code !== '3D000') {
          await orm.close(true);
          throw e;
        }
        const name = databaseName(clientUrl);
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
    const db = new Database(orm, embedded, o.logger);
    db.migrationOrm = migrationOrm;
    return db;
  }

  /** Opens the unbounded connection migrations run on (set when statements are bounded). */
  private migrationOrm: (() => Promise<MikroORM>) | undefined;

  /** Applies pending checked-in migrations; returns the names applied (empty when up to date). */
  async migrate(): Promise<string[]> {
    const own = this.migrationOrm ? await this.migrationOrm() : null;
    let applied: Awaited<ReturnType<ReturnType<MikroORM['getMigrator']>['up']>>;
    try {
      applied = await (own ?? this.orm).getMigrator().up();
    } finally {
      await own?.close(true);
    }
    const names = applied.map((m) => m.name);
    if (names.length) this.logger.info({ migrations: names }, 'migrations applied');
    return names;
  }

  async execute<T = Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<T[]> {
    try {
      const rows = (await traced(sql, () => this.orm.em.getConnection().execute(sql, params as never[], 'all'))) as T[];
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

  /** True when `select 1` answers (within boundMs when given: a hung database is false then, the statement left to its own bounds). */
  async ping(boundMs?: number): Promise<boolean> {
    const run = this.execute('select 1 as ok').then(
      () => true,
      () => false,
    );
    if (boundMs === undefined) return run;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), boundMs);
    });
    try {
      return await Promise.race([run, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    await this.orm.close(true);
    if (this.pglite && !this.pglite.closed) await this.pglite.close();
  }
}
