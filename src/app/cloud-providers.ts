/**
 * The hosted cloud provider use cases (docs/api.md "Cloud providers"): a team's API key for a
 * provider that runs workflows with dispatch_target comfy_cloud. Setting a key checks it with one
 * authenticated call to the provider first (a key the provider refuses is never stored); the
 * records are read without the key.
 */
import { createHash } from 'node:crypto';
import type { TeamPrincipal } from '../identity/principal.js';
import type { OutboundUrlPolicy } from './ports.js';
import { DEFAULT_BASE_URLS, PROVIDER_NAMES, type CloudProviderClient, type CloudProviderSlug } from '../cloud/provider.js';
import { cloudProviderRecord, type CloudCredentials, type CloudProviderRow } from '../cloud/store.js';
import type { AuditNote } from '../shared/audit.js';
import { badGateway, badRequest, notFound } from '../shared/errors.js';
import { paged, type PageRequest } from '../shared/pagination.js';

/** The provider key store (src/cloud/store.ts CloudProviderStore). */
export interface CloudProviderKeys {
  put(p: { teamId: string; slug: string; apiKey: string; baseUrl: string; maxConcurrentJobs: number; partnerNodesOnAgents?: boolean | undefined; createdBy: string | null }, audit?: AuditNote): Promise<boolean>;
  list(teamId: string): Promise<CloudProviderRow[]>;
  get(teamId: string, slug: string): Promise<CloudProviderRow | null>;
  delete(teamId: string, slug: string, audit?: AuditNote): Promise<boolean>;
}

export interface CloudProviderDeps {
  store: CloudProviderKeys;
  guard: OutboundUrlPolicy;
  client: (provider: CloudProviderSlug, c: CloudCredentials) => Pick<CloudProviderClient, 'check' | 'close'>;
  /** GANTRY_CLOUD_MAX_CONCURRENT_JOBS: the default when the request does not say. */
  defaultMaxConcurrentJobs: number;
}

export interface CloudProviderKey {
  apiKey: string;
  baseUrl?: string | undefined;
  maxConcurrentJobs?: number | undefined;
  partnerNodesOnAgents?: boolean | undefined;
}

/**
 * A team has one key per provider (the row's key is (team, provider)): its id is a name-based UUID
 * (RFC 9562 version 8) of the two, so every PUT of the same provider answers the same {id}.
 */
export function cloudProviderId(teamId: string, slug: string): string {
  const h = createHash('sha256').update(`gantry:cloud-provider:${teamId}:${slug}`).digest();
  h[6] = (h[6]! & 0x0f) | 0x80;
  h[8] = (h[8]! & 0x3f) | 0x80;
  const x = h.subarray(0, 16).toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20, 32)}`;
}

const view = (teamId: string, row: CloudProviderRow) => ({ id: cloudProviderId(teamId, row.provider_slug), ...cloudProviderRecord(row) });

export type CloudProviderView = ReturnType<typeof view>;

const providerNotFound = () => notFound('cloud provider', 'cloud_provider_not_found');

export class CloudProviderUseCases {
  constructor(private readonly d: CloudProviderDeps) {}

  /** Checks the key with the provider, then stores it; `created`: the team had no key for the provider. */
  async setKey(p: TeamPrincipal, slug: CloudProviderSlug, k: CloudProviderKey, audit: AuditNote): Promise<{ record: CloudProviderView; created: boolean }> {
    const d = this.d;
    const baseUrl = (k.baseUrl ?? DEFAULT_BASE_URLS[slug]).replace(/\/+$/, '');
    const refused = await d.guard.refusal(baseUrl);
    if (refused !== null) throw badRequest('invalid_parameter', `base_url: ${refused}`);
    // one authenticated call: a key the provider refuses is never stored
    const client = d.client(slug, { apiKey: k.apiKey, baseUrl, maxConcurrentJobs: 1 });
    let problem;
    try {
      problem = await client.check();
    } finally {
      client.close();
    }
    if (problem) {
      if (problem.kind === 'unavailable') throw badGateway('cloud_provider_unreachable', `${PROVIDER_NAMES[slug]} could not check the key: ${problem.message}`);
      // a working key of an account that cannot run jobs (waitlisted, subscription inactive: 429)
      if (problem.kind === 'subscription') throw badRequest('cloud_provider_account_inactive', problem.message);
      throw badRequest('cloud_provider_key_invalid', problem.message);
    }
    const created = await d.store.put(
      { teamId: p.teamId, slug, apiKey: k.apiKey, baseUrl, maxConcurrentJobs: k.maxConcurrentJobs ?? d.defaultMaxConcurrentJobs, partnerNodesOnAgents: k.partnerNodesOnAgents, createdBy: p.userId ?? null },
      audit,
    );
    const row = await d.store.get(p.teamId, slug);
    if (!row) throw providerNotFound();
    return { record: view(p.teamId, row), created };
  }

  async listKeys(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    // at most one row per known provider: paged in memory, with the contract's page_meta
    const rows = await this.d.store.list(p.teamId);
    return paged('provider_list', rows.slice(page.offset, page.offset + page.perPage).map((r) => view(p.teamId, r)), page, rows.length);
  }

  async getKey(p: TeamPrincipal, slug: CloudProviderSlug): Promise<CloudProviderView> {
    const row = await this.d.store.get(p.teamId, slug);
    if (!row) throw providerNotFound();
    return view(p.teamId, row);
  }

  async deleteKey(p: TeamPrincipal, slug: CloudProviderSlug, audit: AuditNote): Promise<{ is_success: true }> {
    if (!(await this.d.store.delete(p.teamId, slug, audit))) throw providerNotFound();
    return { is_success: true };
  }
}
