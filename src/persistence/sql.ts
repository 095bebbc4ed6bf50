import type { Database, Em } from './db.js';

/** A query function bound to a unit of work (or a transaction). `?` placeholders (knex style). */
export type Q = <T = Record<string, any>>(sql: string, params?: unknown[]) => Promise<T[]>;

export const queryOn =
  (em: Em): Q =>
  async <T>(sql: string, params: unknown[] = []) =>
    (await em.execute(sql, params as never[], 'all')) as T[];

/** Runs fn in one PostgreSQL transaction (commit on return, rollback on throw). */
export async function inTx<T>(db: Database, fn: (q: Q) => Promise<T>): Promise<T> {
  return db.em().transactional(async (tem) => fn(queryOn(tem as unknown as Em)));
}

export const q = (db: Database): Q => queryOn(db.em());

export const json = (v: unknown): string => JSON.stringify(v ?? null);
export const ts = (v: Date | string | null | undefined): number | null => (v === null || v === undefined ? null : new Date(v).getTime());
export const iso = (v: Date | string | number | null | undefined): string | null => (v === null || v === undefined ? null : new Date(v).toISOString());
