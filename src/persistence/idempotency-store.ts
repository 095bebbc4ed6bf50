import type { Database } from './db.js';
import { q } from './sql.js';
import { IDEMPOTENCY_TTL_S, type IdempotencyStorePort, type StoredIdempotency } from '../domain/idempotency.js';

export { IDEMPOTENCY_TTL_S, IdempotencyKeyTaken, canonicalJson, idempotencyKeyOf, replayOf, requestFingerprint } from '../domain/idempotency.js';
export type { IdempotencyRecord, StoredIdempotency } from '../domain/idempotency.js';

/**
 * Reads idempotency keys (the write is part of the creating statement, see TaskQueries.insert).
 * Keys older than the TTL are never replayed: the lookup of a key deletes it when it expired, and
 * at most once a minute a lookup also deletes a bounded slice of every team's expired keys.
 */
export class IdempotencyStore implements IdempotencyStorePort {
  private lastSweep = 0;

  constructor(
    private readonly db: Database,
    private readonly opts: { ttlS?: number; sweepEveryMs?: number; now?: () => number } = {},
  ) {}

  private get ttlS(): number {
    return this.opts.ttlS ?? IDEMPOTENCY_TTL_S;
  }

  /** The live record of (team, key), or null; an expired record of that key is deleted in the same statement. */
  async lookup(teamId: string, key: string): Promise<StoredIdempotency | null> {
    this.maybeSweep();
    const rows = await q(this.db)<{ fingerprint: string; response_status: number; response_body: unknown }>(
      `with d as (
         delete from idempotency_keys where team_id = ? and idem_key = ? and created_at < now() - make_interval(secs => ?)
         returning 1)
       select fingerprint, response_status, response_body from idempotency_keys
        where team_id = ? and idem_key = ? and created_at >= now() - make_interval(secs => ?)`,
      [teamId, key, this.ttlS, teamId, key, this.ttlS],
    );
    const r = rows[0];
    // response_body is only ever written by complete() (a response body, passed back verbatim on replay)
    return r ? { fingerprint: r.fingerprint, responseStatus: Number(r.response_status), responseBody: r.response_body as Record<string, unknown> } : null;
  }

  /**
   * Reserves (scope, key) for a request about to run (response_status 0 = in progress); false when
   * the key is already recorded (by an earlier request, or one running now).
   */
  async reserve(scope: string, key: string, fingerprint: string): Promise<boolean> {
    this.maybeSweep();
    // an expired record of the key does not count
    await q(this.db)(`delete from idempotency_keys where team_id = ? and idem_key = ? and created_at < now() - make_interval(secs => ?)`, [scope, key, this.ttlS]);
    const rows = await q(this.db)(
      `insert into idempotency_keys (team_id, idem_key, fingerprint, response_status, response_body) values (?, ?, ?, 0, '{}'::jsonb)
       on conflict (team_id, idem_key) do nothing returning 1`,
      [scope, key, fingerprint],
    );
    return rows.length > 0;
  }

  /** Records the response of a reserved key. */
  async complete(scope: string, key: string, status: number, body: Record<string, unknown>): Promise<void> {
    await q(this.db)(`update idempotency_keys set response_status = ?, response_body = ?::jsonb where team_id = ? and idem_key = ? and response_status = 0`, [status, JSON.stringify(body), scope, key]);
  }

  /** The request of a reserved key failed: the key is free again (a retry runs it anew). */
  async release(scope: string, key: string): Promise<void> {
    await q(this.db)(`delete from idempotency_keys where team_id = ? and idem_key = ? and response_status = 0`, [scope, key]);
  }

  /** Deletes up to `limit` expired keys (all teams); returns how many. */
  async sweep(limit = 1000): Promise<number> {
    const rows = await q(this.db)(
      `delete from idempotency_keys where ctid in (
         select ctid from idempotency_keys where created_at < now() - make_interval(secs => ?) limit ?)
       returning 1`,
      [this.ttlS, limit],
    );
    return rows.length;
  }

  private maybeSweep(): void {
    const now = (this.opts.now ?? Date.now)();
    if (now - this.lastSweep < (this.opts.sweepEveryMs ?? 60_000)) return;
    this.lastSweep = now;
    // best effort: a failed sweep is retried by the next one; lookups never return expired keys anyway
    this.sweep().catch(() => undefined);
  }
}
