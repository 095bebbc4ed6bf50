import type { z } from 'zod';
import { fromZodIssues, invalidParameter } from '../shared/errors.js';
import { isUuid } from '../shared/ids.js';
import type { Ctx } from './http.js';
import type { Principal, TeamPrincipal } from './principal.js';
import type { AuditActor, AuditNote } from '../shared/audit.js';

/** Parses a JSON body with a zod schema; a failure is a 400 naming the field. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.infer<S> {
  const r = schema.safeParse(body ?? {});
  if (!r.success) throw fromZodIssues(r.error.issues);
  return r.data;
}

/** A path parameter that must be a UUID (400 otherwise), lower-cased. */
export function uuidParam(c: Ctx, name: string): string {
  const v = c.params[name] ?? '';
  if (!isUuid(v)) throw invalidParameter(`${name}: must be a UUID (got ${JSON.stringify(v.slice(0, 80))})`);
  return v.toLowerCase();
}

/** The caller of an authenticated route (the authenticator ran; a missing one is a wiring bug). */
export function principalOf(c: Ctx): Principal {
  if (!c.principal) throw new Error('route without a principal');
  return c.principal;
}

/** The caller of a team-scoped route, whose team is resolved. */
export function teamPrincipalOf(c: Ctx): TeamPrincipal {
  const p = principalOf(c);
  if (!p.teamId) throw new Error('team-scoped route reached without a team');
  return p as TeamPrincipal;
}

export const teamOf = (c: Ctx): string => teamPrincipalOf(c).teamId;

/** Who is calling, for the audit log: the principal, the request id and the client IP. */
export function auditActorOf(c: Ctx): AuditActor {
  const p = principalOf(c);
  return { kind: p.kind, userId: p.userId ?? null, credentialId: p.credentialId ?? null, requestId: c.requestId, ip: c.ip || null };
}

/**
 * The audit note of a management write (docs/api.md "Audit log"), handed to the store that commits
 * the change; targetId null: the store fills it (creates).
 */
export function auditOf(c: Ctx, action: string, targetType: string, targetId: string | null = null, details?: Record<string, unknown>): AuditNote {
  return { actor: auditActorOf(c), teamId: principalOf(c).teamId ?? null, action, targetType, targetId, ...(details ? { details } : {}) };
}
