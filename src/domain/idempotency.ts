/**
 * Idempotency-Key (docs/api.md): the header's rule, the request fingerprint (method, path and the
 * canonical body), the replay of a stored answer, and the store port the creating routes and the
 * run use case need (src/persistence/idempotency-store.ts implements it).
 */
import { createHash } from 'node:crypto';
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

/** The idempotency keys as the creating routes (src/edge/idempotency.ts) use them. */
export interface IdempotencyStorePort {
  lookup(scope: string, key: string): Promise<StoredIdempotency | null>;
  /** Claims the key for a request in flight (false: taken). */
  reserve(scope: string, key: string, fingerprint: string): Promise<boolean>;
  complete(scope: string, key: string, status: number, body: Record<string, unknown>): Promise<void>;
  release(scope: string, key: string): Promise<void>;
}

/** The response to a retried request: the stored one when the fingerprint matches, else 409 `idempotency_key_reused`. */
export function replayOf(stored: StoredIdempotency, fingerprint: string): { status: number; body: Record<string, unknown> } {
  if (stored.fingerprint !== fingerprint)
    throw conflict('idempotency_key_reused', 'this Idempotency-Key was already used (within 24 hours) for a request with another method, path or body; use a new key for a new request');
  return { status: stored.responseStatus, body: stored.responseBody };
}
