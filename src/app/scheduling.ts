/**
 * Per-credential scheduling settings (docs/api.md "Scheduling"): an sk- or dk- credential's
 * fair-share weight (default 1; its GPU-seconds are divided by it when the scheduler compares
 * submitters) and max_concurrent_tasks (default none; over it, the credential's tasks wait: no
 * 429). Read and written by the team's owner and admins; a change reaches the team scheduler at
 * once (limits_changed).
 */
import type { ActorSystemPort } from '../actors/ports.js';
import { SCHEDULER } from '../actors/index.js';
import type { TeamPrincipal } from '../identity/principal.js';
import type { AuditNote } from '../shared/audit.js';
import { notFound, type AppError } from '../shared/errors.js';

export interface CredentialScheduling {
  credential_id: string;
  scheduling_weight: number;
  max_concurrent_tasks: number | null;
}

/** The store (src/persistence/credential-scheduling.ts). */
export interface CredentialSchedulingStorePort {
  get(teamId: string, credentialId: string): Promise<CredentialScheduling | null>;
  put(teamId: string, credentialId: string, weight: number, maxConcurrent: number | null, audit?: AuditNote): Promise<CredentialScheduling | null>;
}

export interface SchedulingUpdate {
  scheduling_weight?: number | undefined;
  /** null removes the cap. */
  max_concurrent_tasks?: number | null | undefined;
}

const credentialNotFound = (): AppError => notFound('credential', 'credential_not_found');

export class SchedulingUseCases {
  constructor(private readonly d: { store: CredentialSchedulingStorePort; actors: ActorSystemPort }) {}

  async getScheduling(p: TeamPrincipal, credentialId: string): Promise<CredentialScheduling> {
    const r = await this.d.store.get(p.teamId, credentialId);
    if (!r) throw credentialNotFound();
    return r;
  }

  /** Fields left out keep their value. */
  async putScheduling(p: TeamPrincipal, credentialId: string, u: SchedulingUpdate, audit: AuditNote): Promise<CredentialScheduling> {
    const cur = await this.getScheduling(p, credentialId);
    const weight = u.scheduling_weight ?? cur.scheduling_weight;
    const cap = u.max_concurrent_tasks === undefined ? cur.max_concurrent_tasks : u.max_concurrent_tasks;
    const r = await this.d.store.put(p.teamId, credentialId, weight, cap, audit);
    if (!r) throw credentialNotFound();
    this.d.actors.tell({ kind: SCHEDULER, id: p.teamId }, { type: 'limits_changed', credentialId: r.credential_id, weight: r.scheduling_weight, maxConcurrent: r.max_concurrent_tasks });
    return r;
  }
}
