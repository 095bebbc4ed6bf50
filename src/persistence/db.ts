import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { MikroORM, type EntityManager, type Options } from '@mikro-orm/core';
import { PostgreSqlDriver, type EntityManager as SqlEntityManager } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { PGlite } from '@electric-sql/pglite';
import { PGliteDriver } from 'mikro-orm-pglite';
import type { Logger } from '../shared/logger.js';
import { ConfigError } from '../shared/config.js';
import { uuidv7 } from '../shared/ids.js';
import { allEntities } from './entities/index.js';
import { migrationsList } from './migrations/index.js';

export type Em = SqlEntityManager;

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
      orm = await MikroORM.init({ ...common, driver: PostgreSqlDriver, clientUrl: o.databaseUrl, pool: { min: 0, max: o.poolMax } } as Options);
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
    return (await e.getConnection().execute(sql, params as never[], 'all')) as T[];
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
