/**
 * Idempotency-Key on the creating POSTs other than run (which records its key in the task's own
 * insert statement, routes/tasks.ts): /workflows, /webhooks, /credentials, /models, /nodes, /teams,
 * /teams/current/invitations. One wrapper for all of them (docs/api.md "Idempotency-Key"):
 *
 * - the key is reserved first (a row with status 0, unique per team, or per user for POST /teams):
 *   of two concurrent requests with one key exactly one runs; the other gets 409
 *   `idempotency_key_in_progress` (Retry-After 1) and, retried, the stored response;
 * - the handler's response is then recorded; a retry with the same key and body replays it (same
 *   status, same body, same resource id), another body gets 409 `idempotency_key_reused`;
 * - a handler that fails releases the key (a retry runs again);
 * - a response that shows a secret once (POST /credentials: `credential_value`) is not stored: a
 *   replay answers 409 `idempotency_replay_unavailable` naming the created id, so the client can
 *   revoke it or use it, and no secret sits in the database;
 * - the window: a node that dies after the handler committed and before the response was recorded
 *   leaves the key in progress; it is then refused with 409 in-progress until it expires (24 h), which
 *   errs on the side of never creating twice.
 */
import type { RouteDef, Ctx } from './http.js';
import { Reply } from './http.js';
import { conflict } from '../shared/errors.js';
import { AppError } from '../shared/errors.js';
import { idempotencyKeyOf, requestFingerprint, type IdempotencyStorePort as IdempotencyStore } from '../domain/idempotency.js';

/** Creating POSTs covered here, and the response fields that must never be stored. */
export const IDEMPOTENT_CREATES: ReadonlyMap<string, readonly string[]> = new Map([
  ['/workflows', []],
  ['/webhooks', ['signing_secret', 'webhook_secret']],
  ['/credentials', ['credential_value']],
  ['/models', []],
  ['/nodes', []],
  ['/teams', []],
  ['/teams/current/invitations', ['invitation_token']],
]);

function scopeOf(c: Ctx): string | null {
  return c.principal?.teamId ?? c.principal?.userId ?? null;
}

/** Wraps the handlers of the routes listed in IDEMPOTENT_CREATES; the other routes pass unchanged. */
export function withIdempotency(routes: RouteDef[], store: IdempotencyStore): RouteDef[] {
  return routes.map((r) => {
    const secrets = r.method === 'POST' ? IDEMPOTENT_CREATES.get(r.path) : undefined;
    if (!secrets || !r.handler) return r;
    const handler = r.handler;
    return {
      ...r,
      handler: async (c: Ctx) => {
        const key = idempotencyKeyOf(c.headers);
        const scope = scopeOf(c);
        if (key === null || scope === null) return handler(c);
        const fingerprint = requestFingerprint(c.method, r.path, c.body);
        if (!(await store.reserve(scope, key, fingerprint))) return replay(store, scope, key, fingerprint);
        let out: unknown;
        try {
          out = await handler(c);
        } catch (e) {
          await store.release(scope, key).catch(() => undefined);
          throw e;
        }
        const status = out instanceof Reply ? out.status : 200;
        const body = (out instanceof Reply ? out.body : out) as Record<string, unknown>;
        const hidden = secrets.filter((f) => body && typeof body === 'object' && f in body);
        const stored = hidden.length > 0 ? { __gantry_replay_unavailable: true, id: body.id ?? null } : (body ?? {});
        await store.complete(scope, key, status, stored).catch(() => undefined);
        return out;
      },
    };
  });
}

async function replay(store: IdempotencyStore, scope: string, key: string, fingerprint: string): Promise<unknown> {
  const s = await store.lookup(scope, key);
  if (!s) throw new AppError('unavailable', 'idempotency_key_in_progress', 'a request with this Idempotency-Key is still running; retry shortly', { retryAfterS: 1 });
  if (s.fingerprint !== fingerprint)
    throw conflict('idempotency_key_reused', 'this Idempotency-Key was already used (within 24 hours) for a request with another method, path or body; use a new key for a new request');
  if (s.responseStatus === 0) throw new AppError('conflict', 'idempotency_key_in_progress', 'a request with this Idempotency-Key is still running; retry shortly', { retryAfterS: 1 });
  if (s.responseBody.__gantry_replay_unavailable === true)
    throw conflict(
      'idempotency_replay_unavailable',
      `this Idempotency-Key already created ${String(s.responseBody.id ?? 'the resource')}; its response showed a secret once and is not stored: use that resource (or revoke it) instead of retrying`,
    );
  return s.responseStatus === 200 ? s.responseBody : new Reply(s.responseStatus, s.responseBody);
}
