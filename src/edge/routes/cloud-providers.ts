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
 *
 * The use cases are src/app/cloud-providers.ts.
 */
import { z } from 'zod';
import { notFound } from '../../shared/errors.js';
import { CLOUD_PROVIDER_SLUGS, type CloudProviderSlug } from '../../cloud/provider.js';
import { PROVIDER_STATUSES } from '../../cloud/store.js';
import type { CloudProviderUseCases } from '../../app/cloud-providers.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, parseBody, teamPrincipalOf } from '../params.js';
import { parsePage } from '../../shared/pagination.js';
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

function slugOf(c: Ctx): CloudProviderSlug {
  const s = c.params.provider_slug ?? '';
  if (!(CLOUD_PROVIDER_SLUGS as readonly string[]).includes(s)) throw notFound(`cloud provider ${JSON.stringify(s.slice(0, 64))} (known: ${CLOUD_PROVIDER_SLUGS.join(', ')})`, 'cloud_provider_unknown');
  return s as CloudProviderSlug;
}

export function cloudProviderRoutes(keys: CloudProviderUseCases): RouteDef[] {
  return [
    {
      method: 'PUT',
      path: '/cloud-providers/{provider_slug}',
      auth: MANAGE,
      doc: { summary: "Set the team's key for a hosted cloud provider (checked against the provider first)", tags: ['cloud providers'], body: cloudProviderPutBody, responses: { 200: cloudProviderView }, errors: [404, 502] },
      handler: async (c) => {
        const slug = slugOf(c);
        const b = parseBody(cloudProviderPutBody, c.body);
        const r = await keys.setKey(teamPrincipalOf(c), slug, { apiKey: b.api_key, baseUrl: b.base_url, maxConcurrentJobs: b.max_concurrent_jobs, partnerNodesOnAgents: b.partner_nodes_on_agents }, auditOf(c, 'cloud_provider.set', 'cloud_provider', slug));
        c.log.info({ provider_slug: slug, created: r.created, ...(b.partner_nodes_on_agents !== undefined ? { partner_nodes_on_agents: b.partner_nodes_on_agents } : {}) }, 'cloud provider key set');
        return r.record;
      },
    },
    {
      method: 'GET',
      path: '/cloud-providers',
      auth: READ,
      doc: { summary: "The team's cloud provider keys (status, base_url, key prefix; never the key)", tags: ['cloud providers'], paged: true, responses: { 200: cloudProviderListResponse } },
      handler: async (c) => keys.listKeys(teamPrincipalOf(c), parsePage(c.query)),
    },
    {
      method: 'GET',
      path: '/cloud-providers/{provider_slug}',
      auth: READ,
      doc: { summary: "The team's key record for one provider (provider_status: active, invalid, subscription_inactive; never the key)", tags: ['cloud providers'], responses: { 200: cloudProviderView }, errors: [404] },
      handler: async (c) => keys.getKey(teamPrincipalOf(c), slugOf(c)),
    },
    {
      method: 'DELETE',
      path: '/cloud-providers/{provider_slug}',
      auth: MANAGE,
      doc: { summary: "Remove the team's key for a hosted cloud provider", tags: ['cloud providers'], responses: { 200: D.Success }, errors: [404] },
      handler: async (c) => {
        const slug = slugOf(c);
        const r = await keys.deleteKey(teamPrincipalOf(c), slug, auditOf(c, 'cloud_provider.delete', 'cloud_provider', slug));
        c.log.info({ provider_slug: slug }, 'cloud provider key deleted');
        return r;
      },
    },
  ];
}
