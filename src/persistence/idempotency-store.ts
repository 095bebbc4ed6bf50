import { createHash } from 'node:crypto';
import type { Database } from './db.js';
import { q } from './sql.js';
import { conflict, invalidParameter } from '../shared/errors.js';

/** How long a key is kept (and replayed): 24 hours, per team. */
export const IDEMPOTENCY_TTL_S = 24 * 3600;

/** What a creating POST records with its key, written in the same statement as what it created. */
export interface IdempotencyRecord {
  key: string;
  fingerprint: string;
  responseStatus: number;
  responseBody: Record<string, unknown>;
}

/** A stored key: the fingerprint of the request that created it and the response it got. */
export interface StoredIdempotency {
  fingerprint: string;
  responseStatus: number;
  responseBody: Record<string, unknown>;
}

/**
 * The key of this item was already taken (by an earlier request, or by another item of the same
 * group-commit batch, or by a concurrent batch that committed first): nothing was inserted for it.
 * The caller reads the stored key and replays its response (or answers 409).
 */
export class IdempotencyKeyTaken extends Error {
  constructor(readonly key: string) {
    super('idempotency key already recorded');
    this.name = 'IdempotencyKeyTaken';
  }
}

const KEY_RE = /^[\x21-\x7e]{1,255}$/;

/** The Idempotency-Key header: absent is null; present must be 1-255 visible ASCII characters (400 otherwise). */
export function idempotencyKeyOf(headers: Record<string, string>): string | null {
  const v = headers['idempotency-key'];
  if (v === undefined) return null;
  if (!KEY_RE.test(v)) throw invalidParameter('Idempotency-Key: must be 1 to 255 visible ASCII characters (0x21-0x7E, no spaces)');
  return v;
}

/** JSON with object keys sorted at every level, so the same body written in another key order has the same fingerprint. */
export function canonicalJson(v: unknown): string {
  if (v === undefined) return '';
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : canonicalJson(x))).join(',')}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).filter((k) => o[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
}

/** sha256 of method, path and the canonical body (hex). */
export function requestFingerprint(method: string, path: string, body: unknown): string {
  return createHash('sha256').update(`${method.toUpperCase()}\n${path}\n${canonicalJson(body)}`).digest('hex');
}

/**
 * Reads idempotency keys (the write is part of the creating statement, see TaskQueries.insert).
 * Keys older than the TTL are never replayed: the lookup of a key deletes it when it expired, and
 * at most once a minute a lookup also deletes a bounded slice of every team's expired keys.
 */
export class IdempotencyStore {
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

/** The response to a retried request: the stored one when the fingerprint matches, else 409 `idempotency_key_reused`. */
export function replayOf(stored: StoredIdempotency, fingerprint: string): { status: number; body: Record<string, unknown> } {
  if (stored.fingerprint !== fingerprint)
    throw conflict('idempotency_key_reused', 'this Idempotency-Key was already used (within 24 hours) for a request with another method, path or body; use a new key for a new request');
  return { status: stored.responseStatus, body: stored.responseBody };
}
