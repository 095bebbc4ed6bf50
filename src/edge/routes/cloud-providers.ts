/**
 * Hosted cloud provider keys (docs/api.md "Cloud providers"): a team's API key for a provider that
 * runs workflows with dispatch_target comfy_cloud. Management auth: user JWT or dk- of a team
 * member, sk- rejected. Any member lists them (never the key); setting and deleting need admin.
 *
 *   PUT    /cloud-providers/{provider_slug}   {api_key, base_url?, max_concurrent_jobs?, partner_nodes_on_agents?} -> the record with its {id}
 *          (the key is checked with one authenticated call to the provider first: 400 with its reason,
 *          also when the account behind a working key is not active, e.g. waitlisted)
 *   GET    /cloud-providers                   {provider_list, page_meta} (status, base_url, key prefix, last check; never the key)
 *   GET    /cloud-providers/{provider_slug}   the record (provider_status shows a refused key or an inactive subscription)
 *   DELETE /cloud-providers/{provider_slug}   {is_success}
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { badGateway, badRequest, notFound } from '../../shared/errors.js';
import { OutboundRefused, type OutboundGuard } from '../../events/outbound.js';
import { CLOUD_PROVIDER_SLUGS, DEFAULT_BASE_URLS, PROVIDER_NAMES, type CloudProviderClient, type CloudProviderSlug } from '../../cloud/provider.js';
import { cloudProviderRecord, PROVIDER_STATUSES, type CloudCredentials, type CloudProviderStore } from '../../cloud/store.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, parseBody, teamPrincipalOf } from '../params.js';
import { paged, parsePage } from '../../shared/pagination.js';
import * as D from '../openapi/schemas.js';

const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };

/** PUT /cloud-providers/{provider_slug} body. Messages never quote the key. */
export const cloudProviderPutBody = z
  .object({
    api_key: z
      .string({ error: 'must be a string' })
      .min(8, 'must be at least 8 characters')
      .max(4096, 'must be at most 4096 characters')
      .refine((v) => /^[\x21-\x7e]+$/.test(v), 'must be printable ASCII without spaces'),
    base_url: z.string().max(2048).url('must be an absolute https:// URL').optional(),
    max_concurrent_jobs: z.number().int().min(1).max(256).optional(),
    // comfy_cloud: the team's own agents get this key too (Assign.comfy_org_api_key), for partner
    // (API) nodes of local runs (extra_data.api_key_comfy_org). Omitted: unchanged (false for a new key).
    partner_nodes_on_agents: z.boolean({ error: 'must be a boolean' }).optional(),
  })
  .strict();

/** One provider record (GET /cloud-providers items and the PUT response). */
export const cloudProviderView = D.named(
  'CloudProvider',
  z.object({
  id: z.uuid().describe('stable per (team, provider): the create/update result id of the contract'),
  provider_slug: z.enum(CLOUD_PROVIDER_SLUGS),
  provider_status: z.enum(PROVIDER_STATUSES),
  base_url: z.string(),
  key_prefix: z.string(),
  max_concurrent_jobs: z.number().int(),
  partner_nodes_on_agents: z.boolean(),
  last_checked_at: z.string().nullable(),
  last_error: z.string(),
  created_at: z.string(),
  updated_at: z.string(),
  }),
);

export const cloudProviderListResponse = D.pageOf('provider_list', cloudProviderView);

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

const view = (teamId: string, row: Parameters<typeof cloudProviderRecord>[0]) => ({ id: cloudProviderId(teamId, row.provider_slug), ...cloudProviderRecord(row) });

export interface CloudProviderRouteDeps {
  store: CloudProviderStore;
  guard: OutboundGuard;
  client: (provider: CloudProviderSlug, c: CloudCredentials) => CloudProviderClient;
  /** GANTRY_CLOUD_MAX_CONCURRENT_JOBS: the default when the body does not say. */
  defaultMaxConcurrentJobs: number;
}

function slugOf(c: Ctx): CloudProviderSlug {
  const s = c.params.provider_slug ?? '';
  if (!(CLOUD_PROVIDER_SLUGS as readonly string[]).includes(s)) throw notFound(`cloud provider ${JSON.stringify(s.slice(0, 64))} (known: ${CLOUD_PROVIDER_SLUGS.join(', ')})`, 'cloud_provider_unknown');
  return s as CloudProviderSlug;
}

export function cloudProviderRoutes(d: CloudProviderRouteDeps): RouteDef[] {
  return [
    {
      method: 'PUT',
      path: '/cloud-providers/{provider_slug}',
      auth: MANAGE,
      doc: { summary: "Set the team's key for a hosted cloud provider (checked against the provider first)", tags: ['cloud providers'], body: cloudProviderPutBody, responses: { 200: cloudProviderView }, errors: [404, 502] },
      handler: async (c) => {
        const slug = slugOf(c);
        const b = parseBody(cloudProviderPutBody, c.body);
        const p = teamPrincipalOf(c);
        const baseUrl = (b.base_url ?? DEFAULT_BASE_URLS[slug]).replace(/\/+$/, '');
        try {
          await d.guard.checkUrl(baseUrl);
        } catch (e) {
          if (e instanceof OutboundRefused) throw badRequest('invalid_parameter', `base_url: ${e.message}`);
          throw e;
        }
        // one authenticated call: a key the provider refuses is never stored
        const client = d.client(slug, { apiKey: b.api_key, baseUrl, maxConcurrentJobs: 1 });
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
          { teamId: p.teamId, slug, apiKey: b.api_key, baseUrl, maxConcurrentJobs: b.max_concurrent_jobs ?? d.defaultMaxConcurrentJobs, partnerNodesOnAgents: b.partner_nodes_on_agents, createdBy: p.userId ?? null },
          auditOf(c, 'cloud_provider.set', 'cloud_provider', slug),
        );
        c.log.info({ provider_slug: slug, created, ...(b.partner_nodes_on_agents !== undefined ? { partner_nodes_on_agents: b.partner_nodes_on_agents } : {}) }, 'cloud provider key set');
        const row = await d.store.get(p.teamId, slug);
        if (!row) throw notFound('cloud provider', 'cloud_provider_not_found');
        return view(p.teamId, row);
      },
    },
    {
      method: 'GET',
      path: '/cloud-providers',
      auth: READ,
      doc: { summary: "The team's cloud provider keys (status, base_url, key prefix; never the key)", tags: ['cloud providers'], paged: true, responses: { 200: cloudProviderListResponse } },
      handler: async (c) => {
        // at most one row per known provider: paged in memory, with the contract's page_meta
        const pg = parsePage(c.query);
        const teamId = teamPrincipalOf(c).teamId;
        const rows = await d.store.list(teamId);
        return paged('provider_list', rows.slice(pg.offset, pg.offset + pg.perPage).map((r) => view(teamId, r)), pg, rows.length);
      },
    },
    {
      method: 'GET',
      path: '/cloud-providers/{provider_slug}',
      auth: READ,
      doc: { summary: "The team's key record for one provider (provider_status: active, invalid, subscription_inactive; never the key)", tags: ['cloud providers'], responses: { 200: cloudProviderView }, errors: [404] },
      handler: async (c) => {
        const slug = slugOf(c);
        const row = await d.store.get(teamPrincipalOf(c).teamId, slug);
        if (!row) throw notFound('cloud provider', 'cloud_provider_not_found');
        return view(teamPrincipalOf(c).teamId, row);
      },
    },
    {
      method: 'DELETE',
      path: '/cloud-providers/{provider_slug}',
      auth: MANAGE,
      doc: { summary: "Remove the team's key for a hosted cloud provider", tags: ['cloud providers'], responses: { 200: D.Success }, errors: [404] },
      handler: async (c) => {
        const slug = slugOf(c);
        if (!(await d.store.delete(teamPrincipalOf(c).teamId, slug, auditOf(c, 'cloud_provider.delete', 'cloud_provider', slug)))) throw notFound('cloud provider', 'cloud_provider_not_found');
        c.log.info({ provider_slug: slug }, 'cloud provider key deleted');
        return { is_success: true };
      },
    },
  ];
}
