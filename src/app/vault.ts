/**
 * The credential vault use cases (docs/api.md "Credential vault"): a team's secrets that the
 * gateway injects as one header into requests to its external container services. The records are
 * read without the value; the value is write-only (no answer carries it).
 */
import type { TeamPrincipal } from '../identity/principal.js';
import type { AuditNote } from '../shared/audit.js';
import { notFound, type AppError } from '../shared/errors.js';
import { paged, type PageRequest } from '../shared/pagination.js';
import { vaultCredentialView, type VaultCreate, type VaultCredentialRow, type VaultUpdate } from '../vault/store.js';

/** The vault store (src/vault/store.ts VaultStore). */
export interface VaultCredentials {
  create(c: VaultCreate, audit?: AuditNote): Promise<string>;
  list(teamId: string, limit: number, offset: number): Promise<{ rows: VaultCredentialRow[]; total: number }>;
  get(teamId: string, id: string): Promise<VaultCredentialRow | null>;
  update(teamId: string, id: string, p: VaultUpdate, audit?: AuditNote): Promise<boolean>;
  delete(teamId: string, id: string, audit?: AuditNote): Promise<boolean>;
}

const credentialNotFound = (): AppError => notFound('vault credential', 'vault_credential_not_found');

export class VaultUseCases {
  constructor(private readonly vault: VaultCredentials) {}

  async createCredential(p: TeamPrincipal, c: Omit<VaultCreate, 'teamId' | 'createdBy'>, audit: AuditNote): Promise<{ id: string }> {
    const id = await this.vault.create({ teamId: p.teamId, displayName: c.displayName, headerName: c.headerName, headerValue: c.headerValue, createdBy: p.userId ?? null }, audit);
    return { id };
  }

  async listCredentials(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    const r = await this.vault.list(p.teamId, page.perPage, page.offset);
    return paged('credential_list', r.rows.map(vaultCredentialView), page, r.total);
  }

  /** The record (value_hint, key_id; never the value). */
  async getCredential(p: TeamPrincipal, id: string): Promise<Record<string, unknown>> {
    const r = await this.vault.get(p.teamId, id);
    if (!r) throw credentialNotFound();
    return vaultCredentialView(r);
  }

  async updateCredential(p: TeamPrincipal, id: string, u: VaultUpdate, audit: AuditNote): Promise<{ id: string }> {
    if (!(await this.vault.update(p.teamId, id, u, audit))) throw credentialNotFound();
    return { id };
  }

  async deleteCredential(p: TeamPrincipal, id: string, audit: AuditNote): Promise<{ is_success: true }> {
    if (!(await this.vault.delete(p.teamId, id, audit))) throw credentialNotFound();
    return { is_success: true };
  }
}
