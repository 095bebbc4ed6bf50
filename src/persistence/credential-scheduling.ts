/**
 * Per-credential scheduling settings (table credential_scheduling): the fair-share weight and the
 * max_concurrent_tasks cap of an sk- or dk- credential. The team scheduler reads a team's at start
 * (SchedulingLimitsPort); PUT /credentials/{id}/scheduling writes them (src/app/scheduling.ts).
 */
import type { AuditNote } from '../shared/audit.js';
import type { SubmitterLimits } from '../actors/scheduler/fair.js';
import { audited } from './audit.js';
import type { Database } from './db.js';
import { q } from './sql.js';

/** A credential's settings as the API shows them. */
export interface CredentialScheduling {
  credential_id: string;
  scheduling_weight: number;
  max_concurrent_tasks: number | null;
}

interface Row {
  credential_id: string;
  scheduling_weight: number | null;
  max_concurrent_tasks: number | null;
}

const view = (r: Row): CredentialScheduling => ({ credential_id: String(r.credential_id), scheduling_weight: Number(r.scheduling_weight ?? 1), max_concurrent_tasks: r.max_concurrent_tasks === null ? null : Number(r.max_concurrent_tasks) });

/** Credentials that submit tasks (sk-, dk-): agent credentials have no scheduling settings. */
const SUBMITTING = `c.credential_type in ('integration', 'device') and c.revoked_at is null`;

export class CredentialSchedulingStore {
  constructor(private readonly db: Database) {}

  async forTeam(teamId: string): Promise<Map<string, SubmitterLimits>> {
    const rows = await q(this.db)<Row>('select credential_id, scheduling_weight, max_concurrent_tasks from credential_scheduling where team_id = ?', [teamId]);
    return new Map(rows.map((r) => [String(r.credential_id), { weight: Number(r.scheduling_weight ?? 1), maxConcurrent: r.max_concurrent_tasks === null ? null : Number(r.max_concurrent_tasks) }]));
  }

  /** The credential's settings (defaults when never set); null when it is not a submitting credential of the team. */
  async get(teamId: string, credentialId: string): Promise<CredentialScheduling | null> {
    const rows = await q(this.db)<Row>(
      `select c.id as credential_id, s.scheduling_weight, s.max_concurrent_tasks from credentials c left join credential_scheduling s on s.credential_id = c.id
       where c.id = ? and c.team_id = ? and ${SUBMITTING}`,
      [credentialId, teamId],
    );
    return rows[0] ? view(rows[0]) : null;
  }

  /** Sets both values (null cap = none); null when the credential is not a submitting credential of the team. */
  async put(teamId: string, credentialId: string, weight: number, maxConcurrent: number | null, audit?: AuditNote): Promise<CredentialScheduling | null> {
    return audited(this.db, audit, async (tx, record) => {
      const rows = await tx<Row>(
        `insert into credential_scheduling (credential_id, team_id, scheduling_weight, max_concurrent_tasks, updated_at)
         select c.id, c.team_id, ?, ?, now() from credentials c where c.id = ? and c.team_id = ? and ${SUBMITTING}
         on conflict (credential_id) do update set scheduling_weight = excluded.scheduling_weight, max_concurrent_tasks = excluded.max_concurrent_tasks, updated_at = now()
         returning credential_id, scheduling_weight, max_concurrent_tasks`,
        [weight, maxConcurrent, credentialId, teamId],
      );
      if (!rows[0]) return null;
      await record({ details: { scheduling_weight: weight, max_concurrent_tasks: maxConcurrent } });
      return view(rows[0]);
    });
  }
}
