/**
 * The audit trail's vocabulary (docs/api.md "Audit log"). The edge builds an AuditNote for every
 * management write (who, from where, what, on which target) and hands it down to the store that
 * commits the change; the store appends it in the same transaction (src/persistence/audit.ts), and
 * only when the change happened: a refused or failed write leaves no entry.
 */
import { z } from 'zod';

export const AUDIT_ACTOR_KINDS = ['user', 'device', 'integration', 'agent', 'system'] as const;
export type AuditActorKind = (typeof AUDIT_ACTOR_KINDS)[number];

const str = z.string().max(256);

export const AuditActorSchema = z.object({
  kind: z.enum(AUDIT_ACTOR_KINDS),
  /** The user (JWT, dk-); null for sk- and system actors. */
  userId: str.nullable(),
  /** The credential used (dk-, sk-); null for a JWT session. */
  credentialId: str.nullable(),
  requestId: str.nullable(),
  ip: str.nullable(),
});
export type AuditActor = z.infer<typeof AuditActorSchema>;

/** Plain JSON (it rides in actor messages across nodes, e.g. container operations). */
export const AuditNoteSchema = z.object({
  actor: AuditActorSchema,
  /** The team the change belongs to; a store may fill it when the edge cannot know it (a team being created, an invitation accepted). */
  teamId: str.nullable(),
  /** `<resource>.<verb>`, e.g. `workflow.create`, `member.role_change`, `container.deploy`. */
  action: str,
  targetType: str,
  /** The target's id; a store fills it for creates (the id is minted there). */
  targetId: str.nullable(),
  details: z.record(z.string(), z.unknown()).optional(),
});
export type AuditNote = z.infer<typeof AuditNoteSchema>;

/** What a store adds to a note once it knows (a created id, the team of an accepted invitation). */
export interface AuditFill {
  teamId?: string;
  targetId?: string;
  details?: Record<string, unknown>;
}

/** Appends a note (fill merged in) through a transaction's query function. */
export type AuditRecorder = (fill?: AuditFill) => Promise<void>;
