/**
 * SQL of the hosted cloud providers (tables cloud_providers and cloud_jobs). Every query takes the
 * team id (team scope in the store layer): another team's key is simply not found. The API key is
 * encrypted with the vault keyring before it is written (AES-256-GCM, bound to (team, provider)) and
 * decrypted only by credentials(), the one way it leaves the store; every other read selects the
 * columns without key_enc.
 */
import { audited } from '../persistence/audit.js';
import type { Database } from '../persistence/db.js';
import type { AuditNote } from '../shared/audit.js';
import { iso, q, type Q } from '../persistence/sql.js';
import { cloudProviderAad, type VaultKeyring } from '../vault/keyring.js';

export interface CloudProviderRow {
  team_id: string;
  provider_slug: string;
  base_url: string;
  key_id: string;
  key_prefix: string;
  max_concurrent_jobs: number;
  provider_status: string;
  partner_nodes_on_agents: boolean;
  last_checked_at: Date | null;
  last_error: string;
  created_at: Date;
  updated_at: Date;
}

/**
 * active: the key worked at its last use; invalid: the provider refused the key (401/403);
 * subscription_inactive: the provider refused a job because the account's subscription is inactive or
 * not paid (Comfy Cloud 429). A successful submission or a new PUT sets it back to active.
 */
export const PROVIDER_STATUSES = ['active', 'invalid', 'subscription_inactive'] as const;
export type ProviderStatus = (typeof PROVIDER_STATUSES)[number];

/** The record callers see: never the key. */
export const cloudProviderRecord = (r: CloudProviderRow) => ({
  provider_slug: r.provider_slug,
  provider_status: r.provider_status as ProviderStatus,
  base_url: r.base_url,
  key_prefix: r.key_prefix,
  max_concurrent_jobs: Number(r.max_concurrent_jobs),
  partner_nodes_on_agents: r.partner_nodes_on_agents === true,
  last_checked_at: r.last_checked_at ? iso(r.last_checked_at) : null,
  last_error: r.last_error,
  created_at: iso(r.created_at),
  updated_at: iso(r.updated_at),
});

/** The first characters of a key, as providers show them (`comfyui-1a…`); short keys show nothing. */
export const keyPrefix = (key: string): string => {
  const chars = [...key];
  if (chars.length >= 24) return chars.slice(0, 8).join('');
  if (chars.length >= 12) return chars.slice(0, 4).join('');
  return '';
};

const COLUMNS = 'team_id, provider_slug, base_url, key_id, key_prefix, max_concurrent_jobs, provider_status, partner_nodes_on_agents, last_checked_at, last_error, created_at, updated_at';

export interface CloudCredentials {
  apiKey: string;
  baseUrl: string;
  maxConcurrentJobs: number;
}

/**
 * How long this node reuses a team's partner-node setting (partnerKeyForAgents) before reading it
 * again: a dispatch of a ComfyUI task asks for it each time, and without this it was one query per
 * task. A change made through this node is seen at once (put/delete forget the team); one made
 * through another node of a cluster within this bound.
 */
export const PARTNER_KEY_TTL_MS = 2000;

export class CloudProviderStore {
  /** team -> its comfy_cloud key_enc when partner nodes run on its agents, else null (still encrypted). */
  private readonly partnerCache = new Map<string, { until: number; keyEnc: Promise<string | null> }>();

  constructor(
    private readonly db: Database,
    readonly keyring: VaultKeyring,
    private readonly now: () => number = Date.now,
  ) {}

  private get q(): Q {
    return q(this.db);
  }

  /** Creates or replaces the team's key for the provider (encrypted under the active vault key); true when it was created. */
  /**
   * partnerNodesOnAgents: undefined keeps the current setting (false for a new key). The audit entry
   * says whether the key was new and the setting's value (and whether it changed), never the key.
   */
  async put(p: { teamId: string; slug: string; apiKey: string; baseUrl: string; maxConcurrentJobs: number; partnerNodesOnAgents?: boolean | undefined; createdBy: string | null }, audit?: AuditNote): Promise<boolean> {
    const enc = this.keyring.encrypt(p.apiKey, cloudProviderAad(p.teamId, p.slug));
    const at = new Date(this.now());
    const created = await audited(this.db, audit, async (tq, record) => {
    const before = (await tq<{ partner_nodes_on_agents: boolean }>('select partner_nodes_on_agents from cloud_providers where team_id = ? and provider_slug = ? for update', [p.teamId, p.slug]))[0];
    const partner = p.partnerNodesOnAgents ?? before?.partner_nodes_on_agents ?? false;
    const r = await tq<{ created: boolean }>(
      `insert into cloud_providers (team_id, provider_slug, base_url, key_enc, key_id, key_prefix, max_concurrent_jobs, provider_status, partner_nodes_on_agents, last_checked_at, last_error, created_by, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, '', ?, ?, ?)
       on conflict (team_id, provider_slug) do update set base_url = excluded.base_url, key_enc = excluded.key_enc, key_id = excluded.key_id,
         key_prefix = excluded.key_prefix, max_concurrent_jobs = excluded.max_concurrent_jobs, provider_status = 'active',
         partner_nodes_on_agents = excluded.partner_nodes_on_agents,
         last_checked_at = excluded.last_checked_at, last_error = '', updated_at = excluded.updated_at
       returning (xmax = 0) as created`,
      [p.teamId, p.slug, p.baseUrl, enc, this.keyring.activeKid, keyPrefix(p.apiKey), p.maxConcurrentJobs, partner, at, p.createdBy, at, at],
    );
    const created = r[0]?.created === true;
    // the audit entry records whether the key was new and who may use it, never the key (nor its prefix)
    await record({ details: { created, base_url: p.baseUrl, partner_nodes_on_agents: partner, partner_nodes_on_agents_changed: partner !== (before?.partner_nodes_on_agents ?? false) } });
    return created;
    });
    // after the commit: the next dispatch reads the new setting
    this.partnerCache.delete(p.teamId);
    return created;
  }

  async list(teamId: string): Promise<CloudProviderRow[]> {
    return this.q<CloudProviderRow>(`select ${COLUMNS} from cloud_providers where team_id = ? order by provider_slug`, [teamId]);
  }

  async get(teamId: string, slug: string): Promise<CloudProviderRow | null> {
    return (await this.q<CloudProviderRow>(`select ${COLUMNS} from cloud_providers where team_id = ? and provider_slug = ?`, [teamId, slug]))[0] ?? null;
  }

  async delete(teamId: string, slug: string, audit?: AuditNote): Promise<boolean> {
    const gone = await audited(this.db, audit, async (tq, record) => {
      const g = (await tq('delete from cloud_providers where team_id = ? and provider_slug = ? returning team_id', [teamId, slug])).length === 1;
      if (g) await record();
      return g;
    });
    this.partnerCache.delete(teamId);
    return gone;
  }

  /** The decrypted key and settings (the dispatcher's only way to the key); null when the team has none. */
  async credentials(teamId: string, slug: string): Promise<CloudCredentials | null> {
    const r = (await this.q<{ key_enc: string; base_url: string; max_concurrent_jobs: number }>('select key_enc, base_url, max_concurrent_jobs from cloud_providers where team_id = ? and provider_slug = ?', [teamId, slug]))[0];
    if (!r) return null;
    return { apiKey: this.keyring.decrypt(r.key_enc, cloudProviderAad(teamId, slug)), baseUrl: r.base_url, maxConcurrentJobs: Number(r.max_concurrent_jobs) };
  }

  /** The provider refused a job for the key or the account (or it works again): shown by GET /cloud-providers. */
  async markStatus(teamId: string, slug: string, status: ProviderStatus, error: string): Promise<void> {
    await this.q(`update cloud_providers set provider_status = ?, last_error = ?, last_checked_at = ? where team_id = ? and provider_slug = ?`, [status, error.slice(0, 1000), new Date(this.now()), teamId, slug]);
  }

  /** A submission went through: a status left by an earlier refusal is cleared (one cheap no-op update otherwise). */
  async markWorking(teamId: string, slug: string): Promise<void> {
    await this.q(`update cloud_providers set provider_status = 'active', last_error = '', last_checked_at = ? where team_id = ? and provider_slug = ? and provider_status <> 'active'`, [new Date(this.now()), teamId, slug]);
  }

  /**
   * The team's Comfy Cloud key for its own agents (partner nodes of local runs), or null unless the
   * team turned partner_nodes_on_agents on. Decrypted only for the Assign message being written.
   */
  async partnerKeyForAgents(teamId: string): Promise<string | null> {
    const slug = 'comfy_cloud';
    // the row is read at most once per PARTNER_KEY_TTL_MS per team (concurrent dispatches share the
    // read); the key stays encrypted in the cache and is decrypted for each message
    const now = this.now();
    let hit = this.partnerCache.get(teamId);
    if (!hit || hit.until <= now) {
      const keyEnc = this.q<{ key_enc: string }>('select key_enc from cloud_providers where team_id = ? and provider_slug = ? and partner_nodes_on_agents', [teamId, slug]).then((rows) => rows[0]?.key_enc ?? null);
      hit = { until: now + PARTNER_KEY_TTL_MS, keyEnc };
      const entry = hit;
      // a failed read is not kept
      keyEnc.catch(() => {
        if (this.partnerCache.get(teamId) === entry) this.partnerCache.delete(teamId);
      });
      if (this.partnerCache.size >= 10_000) this.partnerCache.clear();
      this.partnerCache.set(teamId, hit);
    }
    const enc = await hit.keyEnc;
    return enc === null ? null : this.keyring.decrypt(enc, cloudProviderAad(teamId, slug));
  }

  /** Before a submission: the prompt_id we send (accepted = false until the provider answered it). */
  async recordSubmission(taskId: string, teamId: string, slug: string, promptId: string): Promise<void> {
    await this.q(`insert into cloud_jobs (task_id, team_id, provider_slug, prompt_id, accepted) values (?, ?, ?, ?, false) on conflict (task_id) do update set prompt_id = excluded.prompt_id, accepted = false`, [taskId, teamId, slug, promptId]);
  }

  /** Records the provider's job of a task (the provider accepted it). */
  async recordJob(taskId: string, teamId: string, slug: string, promptId: string): Promise<void> {
    await this.q(`insert into cloud_jobs (task_id, team_id, provider_slug, prompt_id, accepted) values (?, ?, ?, ?, true) on conflict (task_id) do update set prompt_id = excluded.prompt_id, accepted = true`, [taskId, teamId, slug, promptId]);
  }

  /** The task's provider job id: accepted, or only sent (the submission's outcome is unknown). */
  async submissionOf(teamId: string, taskId: string): Promise<{ promptId: string; accepted: boolean } | null> {
    const r = (await this.q<{ prompt_id: string; accepted: boolean }>('select prompt_id, accepted from cloud_jobs where team_id = ? and task_id = ?', [teamId, taskId]))[0];
    return r ? { promptId: r.prompt_id, accepted: r.accepted } : null;
  }

  async jobOf(teamId: string, taskId: string): Promise<string | null> {
    return (await this.submissionOf(teamId, taskId))?.promptId ?? null;
  }

  /** Re-encrypts keys not under the active vault key (after GANTRY_VAULT_KEYS got a new first key). */
  async rotate(): Promise<number> {
    this.partnerCache.clear();
    const rows = await this.q<{ team_id: string; provider_slug: string; key_enc: string }>('select team_id, provider_slug, key_enc from cloud_providers where key_id <> ?', [this.keyring.activeKid]);
    let n = 0;
    for (const r of rows) {
      const aad = cloudProviderAad(r.team_id, r.provider_slug);
      const fresh = this.keyring.encrypt(this.keyring.decrypt(r.key_enc, aad), aad);
      n += (await this.q('update cloud_providers set key_enc = ?, key_id = ? where team_id = ? and provider_slug = ? and key_enc = ? returning team_id', [fresh, this.keyring.activeKid, r.team_id, r.provider_slug, r.key_enc])).length;
    }
    return n;
  }
}
