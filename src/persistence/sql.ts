import type { Knex } from '@mikro-orm/knex';
import { traced, type Database } from './db.js';
import { hasActiveSpan, inSpan, SpanKind, withoutSpan } from '../shared/tracing.js';

/**
 * A query function bound to the pool (autocommit) or to a transaction. `?` placeholders (knex style).
 * Every function here throws errors normalised by the database layer (Database.failed /
 * normaliseDbError): a 503 `database_unavailable` AppError when the server is unreachable, a
 * DbError (SQLSTATE, constraint, statement shape; no parameter values) for a failed statement.
 */
export type Q = <T = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<T[]>;

/** The driver connection (its knex pool): raw SQL needs no unit of work, so no em.fork() per query. */
const connectionOf = (db: Database) => db.orm.em.getConnection();

/**
 * Runs fn in one PostgreSQL transaction (commit on return, rollback on throw). The pooled
 * connection is held until commit: fn must await only its own queries, never unrelated work.
 * fn's own errors pass through; a failed BEGIN or COMMIT is normalised like a statement's.
 */
export async function inTx<T>(db: Database, fn: (q: Q) => Promise<T>): Promise<T> {
  // traced: the transaction is one span, its statements its children
  if (hasActiveSpan()) return inSpan('pg transaction', { kind: SpanKind.CLIENT, attributes: { 'db.system.name': 'postgresql' } }, () => runTx(db, fn));
  return runTx(db, fn);
}

async function runTx<T>(db: Database, fn: (q: Q) => Promise<T>): Promise<T> {
  const conn = connectionOf(db);
  try {
    const r = await conn.transactional(async (trx: Knex.Transaction) =>
      fn(async <R>(sql: string, params: unknown[] = []) => {
        try {
          return (await traced(sql, () => conn.execute(sql, params as never[], 'all', trx))) as R[];
        } catch (e) {
          throw db.failed(e, sql);
        }
      }),
    );
    db.succeeded();
    return r;
  } catch (e) {
    throw db.failed(e, 'commit');
  }
}

/**
 * Like q, but the values travel as bound parameters ($1..$n, the extended protocol) instead of being
 * escaped into the statement's text: for hot statements whose one parameter is a large JSON document
 * (the submit batch), where quoting it costs more than the statement. Parameters must be strings,
 * numbers, booleans or null (no driver-side conversion of dates, arrays or objects is wanted).
 */
export const qBound = (db: Database): Q => {
  // the embedded database (PGlite) keeps the formatted path: its knex dialect's raw result differs
  if (db.embedded) return q(db);
  const knex = (connectionOf(db) as unknown as { getKnex(): Knex }).getKnex();
  return async <T>(sql: string, params: unknown[] = []) => {
    try {
      const res = (await traced(sql, () => knex.raw(sql, params as Knex.RawBinding[]))) as unknown as { rows: T[] };
      db.succeeded();
      return res.rows;
    } catch (e) {
      throw db.failed(e, sql);
    }
  };
};

/** Autocommit queries on the pool (one statement = one atomic transaction). */
export const q = (db: Database): Q => {
  const conn = connectionOf(db);
  return async <T>(sql: string, params: unknown[] = []) => {
    try {
      const rows = (await traced(sql, () => conn.execute(sql, params as never[], 'all'))) as T[];
      db.succeeded();
      return rows;
    } catch (e) {
      throw db.failed(e, sql);
    }
  };
};

export const json = (v: unknown): string => JSON.stringify(v ?? null);
export const ts = (v: Date | string | null | undefined): number | null => (v === null || v === undefined ? null : new Date(v).getTime());
/** The stores' row helpers come from this module: iso is the shared one. */
export { iso } from '../shared/time.js';

/** One item's outcome in a batch: its own value, or its own error. */
export type Settled<R> = { value: R } | { error: unknown };

export interface TickBatcherOptions<I> {
  /** Most items per statement (default 500). */
  maxBatch?: number;
  /** Batches running at once (default 1): while they run, new items gather into the next one. */
  maxInFlight?: number;
  /**
   * Items with the same key never share a batch, never run in two batches at once, and keep their
   * submission order (e.g. the task id).
   */
  key?: (item: I) => string;
}

export interface BatcherStats {
  /** Batches run (each one statement / one transaction for the callers' items). */
  batches: number;
  /** Items submitted through them. */
  items: number;
  /** Batches whose run threw (every item of it failed). */
  failedBatches: number;
  /** The largest batch so far. */
  maxBatch: number;
}

/**
 * Group commit: items submitted in the same event-loop tick (and while earlier batches are still
 * running) are handed to `run` together, once per tick (setImmediate), so concurrent callers share
 * one statement. Each caller's promise settles only after `run` returned (its statement finished);
 * when `run` throws, every item of that batch is rejected with that error.
 */
export class TickBatcher<I, R> {
  private queue: Array<{ item: I; resolve: (r: R) => void; reject: (e: unknown) => void }> = [];
  private scheduled = false;
  private inFlight = 0;
  /** Keys of the items in running batches: a later item of such a key waits until its batch ends. */
  private readonly busy = new Map<string, number>();
  private holds = 0;
  private idle: Array<() => void> = [];
  private queuedWaiters: Array<{ n: number; resolve: () => void }> = [];
  readonly stats: BatcherStats = { batches: 0, items: 0, failedBatches: 0, maxBatch: 0 };
  private readonly maxBatch: number;
  private readonly maxInFlight: number;

  constructor(
    private readonly run: (items: I[]) => Promise<Array<Settled<R>>>,
    private readonly o: TickBatcherOptions<I> = {},
  ) {
    this.maxBatch = o.maxBatch ?? 500;
    this.maxInFlight = o.maxInFlight ?? 1;
  }

  submit(item: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      for (const w of this.queuedWaiters.filter((x) => this.queue.length >= x.n)) {
        this.queuedWaiters.splice(this.queuedWaiters.indexOf(w), 1);
        w.resolve();
      }
      this.schedule();
    });
  }

  /** Items waiting for a batch. */
  get queued(): number {
    return this.queue.length;
  }

  /** Resolves once at least n items are waiting (tests hold the batcher, then wait for their requests). */
  whenQueued(n: number): Promise<void> {
    if (this.queue.length >= n) return Promise.resolve();
    return new Promise((resolve) => this.queuedWaiters.push({ n, resolve }));
  }

  /** Stops starting batches until the returned function is called (items keep gathering). */
  hold(): () => void {
    this.holds += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.holds -= 1;
      this.schedule();
    };
  }

  /** Resolves when nothing is queued or running (shutdown). */
  async drain(): Promise<void> {
    while (this.queue.length > 0 || this.inFlight > 0) await new Promise<void>((r) => this.idle.push(r));
  }

  private schedule(): void {
    if (this.scheduled || this.holds > 0 || this.inFlight >= this.maxInFlight || this.queue.length === 0) return;
    this.scheduled = true;
    // a batch serves many callers: it runs outside the trace of the one that scheduled it
    withoutSpan(() => setImmediate(() => {
      this.scheduled = false;
      this.flush();
    }));
  }

  private take(): Array<{ item: I; resolve: (r: R) => void; reject: (e: unknown) => void }> {
    const key = this.o.key;
    if (!key) return this.queue.splice(0, this.maxBatch);
    const batch: typeof this.queue = [];
    const rest: typeof this.queue = [];
    const seen = new Set<string>(this.busy.keys());
    for (const x of this.queue) {
      const k = key(x.item);
      // a later item of a key already in this batch (or already deferred) waits for the next one
      if (batch.length >= this.maxBatch || seen.has(k)) {
        rest.push(x);
        seen.add(k);
        continue;
      }
      seen.add(k);
      batch.push(x);
    }
    this.queue = rest;
    for (const x of batch) {
      const k = key(x.item);
      this.busy.set(k, (this.busy.get(k) ?? 0) + 1);
    }
    return batch;
  }

  private flush(): void {
    if (this.holds > 0 || this.inFlight >= this.maxInFlight || this.queue.length === 0) return;
    const batch = this.take();
    // every waiting item belongs to a key whose batch is still running: that batch's end reschedules
    if (batch.length === 0) return;
    this.inFlight += 1;
    this.stats.batches += 1;
    this.stats.items += batch.length;
    this.stats.maxBatch = Math.max(this.stats.maxBatch, batch.length);
    const settle = (results: Array<Settled<R>> | null, err: unknown): void => {
      batch.forEach((x, i) => {
        const r = results?.[i];
        if (!r) x.reject(err ?? new Error('batch returned no result for an item'));
        else if ('error' in r) x.reject(r.error);
        else x.resolve(r.value);
      });
    };
    this.run(batch.map((x) => x.item))
      .then(
        (results) => settle(results, null),
        (err: unknown) => {
          this.stats.failedBatches += 1;
          settle(null, err);
        },
      )
      .finally(() => {
        this.inFlight -= 1;
        const key = this.o.key;
        if (key)
          for (const x of batch) {
            const k = key(x.item);
            const n = (this.busy.get(k) ?? 1) - 1;
            if (n <= 0) this.busy.delete(k);
            else this.busy.set(k, n);
          }
        if (this.queue.length > 0) this.schedule();
        else if (this.inFlight === 0) for (const r of this.idle.splice(0)) r();
      });
  }
}

/**
 * The cluster member fence (cluster mode): a write of this node only applies while its member row
 * in cluster_members is not fenced (a node that lost its membership writes nothing). Empty on a
 * single node. The member id is validated here, so it can be inlined as a literal.
 */
export function memberFenceSql(memberId: string | null): string {
  if (memberId === null) return '';
  if (!/^[A-Za-z0-9._:/@-]{1,200}$/.test(memberId)) throw new Error(`invalid cluster member id ${JSON.stringify(memberId)}`);
  return ` and exists (select 1 from cluster_members cm where cm.member_id = '${memberId}' and cm.fenced_at is null)`;
}
