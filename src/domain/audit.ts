/** An audit log entry as stored, the filters of its reads, and the entry as callers see it. */
export interface AuditRow {
  id: string;
  team_id: string;
  actor_kind: string;
  actor_user_id: string | null;
  actor_credential_id: string | null;
  action: string;
  target_type: string;
  target_id: string | null;
  request_id: string | null;
  client_ip: string | null;
  outcome: string;
  details: Record<string, unknown>;
  created_at: Date | string;
}

export interface AuditFilter {
  action?: string | undefined;
  /** A user id or credential id. */
  actor?: string | undefined;
  targetType?: string | undefined;
  targetId?: string | undefined;
  since?: Date | undefined;
  until?: Date | undefined;
}

export const auditView = (r: AuditRow): Record<string, unknown> => ({
  id: r.id,
  team_id: r.team_id,
  actor_kind: r.actor_kind,
  actor_user_id: r.actor_user_id,
  actor_credential_id: r.actor_credential_id,
  action: r.action,
  target_type: r.target_type,
  target_id: r.target_id,
  request_id: r.request_id,
  client_ip: r.client_ip,
  outcome: r.outcome,
  details: r.details ?? {},
  created_at: new Date(r.created_at).toISOString(),
});
