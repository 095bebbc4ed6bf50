/**
 * The audit log use case (docs/api.md "Audit log"): a team's entries, newest first. Every
 * management write appends its entry in the same transaction as the change (the stores do that);
 * this only reads, always within the caller's team.
 */
import type { TeamPrincipal } from '../identity/principal.js';
import { auditView, type AuditFilter, type AuditRow } from '../domain/audit.js';
import { paged, type PageRequest } from '../shared/pagination.js';

/** The audit store (src/persistence/audit.ts AuditStore). */
export interface AuditLog {
  list(teamId: string, f: AuditFilter, limit: number, offset: number): Promise<{ rows: AuditRow[]; total: number }>;
}

export type { AuditFilter };

export class AuditUseCases {
  constructor(private readonly audit: AuditLog) {}

  async listAudit(p: TeamPrincipal, page: PageRequest, f: AuditFilter): Promise<Record<string, unknown>> {
    const r = await this.audit.list(p.teamId, f, page.perPage, page.offset);
    return paged('audit_list', r.rows.map(auditView), page, r.total);
  }
}
