import type { Knex } from '@mikro-orm/knex';
import type { Database, Em } from './db.js';

/** A query function bound to a unit of work (or a transaction). `?` placeholders (knex style). */
export type Q = <T = Record<string, any>>(sql: string, params?: unknown[]) => Promise<T[]>;

export const queryOn =
  (em: Em): Q =>
  async <T>(sql: string, params: unknown[] = []) =>
    (await em.execute(sql, params as never[], 'all')) as T[];

/** The driver connection (its knex pool): raw SQL needs no unit of work, so no em.fork() per query. */
const connectionOf = (db: Database) => db.orm.em.getConnection();

/**
 * Runs fn in one PostgreSQL transaction (commit on return, rollback on throw). The pooled
 * connection is held until commit: fn must await only its own queries, never unrelated work.
 */
export async function inTx<T>(db: Database, fn: (q: Q) => Promise<T>): Promise<T> {
  const conn = connectionOf(db);
  return conn.transactional(async (trx: Knex.Transaction) =>
    fn(async <R>(sql: string, params: unknown[] = []) => (await conn.execute(sql, params as never[], 'all', trx)) as R[]),
  );
}

/** Autocommit queries on the pool (one statement = one atomic transaction). */
export const q = (db: Database): Q => {
  const conn = connectionOf(db);
  return async <T>(sql: string, params: unknown[] = []) => (await conn.execute(sql, params as never[], 'all')) as T[];
};

export const json = (v: unknown): string => JSON.stringify(v ?? null);
export const ts = (v: Date | string | null | undefined): number | null => (v === null || v === undefined ? null : new Date(v).getTime());
export const iso = (v: Date | string | number | null | undefined): string | null => (v === null || v === undefined ? null : new Date(v).toISOString());
