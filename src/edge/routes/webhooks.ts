/**
 * Webhooks (docs/api.md). Management auth: user JWT or dk- of a team member, sk- rejected.
 * Roles: any member lists webhooks and reads delivery logs; creating, updating, deleting,
 * redelivering and reading the detail record (it carries the signing secret) need admin.
 *
 *   POST   /webhooks                                   {display_name, webhook_url, webhook_events} -> {id}
 *   GET    /webhooks                                   {webhook_list, page_meta}
 *   GET    /webhooks/{webhookId}                       detail incl. signing_secret
 *   PUT    /webhooks/{webhookId}                       any of display_name, webhook_url, webhook_events, webhook_status -> {id}
 *   DELETE /webhooks/{webhookId}                       {is_success}
 *   GET    /webhooks/{webhookId}/deliveries            {delivery_list, page_meta} (?delivery_status)
 *   POST   /webhooks/{webhookId}/deliveries/{deliveryId}/redeliver -> {id} of the new delivery
 */
import { z } from 'zod';
import type { LiveEvents } from '../../events/index.js';
import { OutboundRefused } from '../../events/outbound.js';
import { DELIVERY_STATUSES, WEBHOOK_EVENTS, deliveryView, webhookView } from '../../events/store.js';
import { badRequest, conflict, invalidParameter, notFound } from '../../shared/errors.js';
import { paged, parsePage } from '../../shared/pagination.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, parseBody, teamPrincipalOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';

const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };

const url = z
  .string()
  .max(2048)
  .refine((v) => v.startsWith('https://'), 'must start with https://')
  .refine((v) => URL.canParse(v), 'must be a valid absolute URL');
const events = z.array(z.enum(WEBHOOK_EVENTS)).min(1, 'at least one event is required').max(WEBHOOK_EVENTS.length * 4);
const name = z.string().trim().min(1).max(255);

const createBody = z.object({ display_name: name, webhook_url: url, webhook_events: events }).strict();
const updateBody = z
  .object({ display_name: name.optional(), webhook_url: url.optional(), webhook_events: events.optional(), webhook_status: z.enum(['active', 'disabled']).optional() })
  .strict()
  .refine((b) => Object.values(b).some((v) => v !== undefined), 'at least one of display_name, webhook_url, webhook_events, webhook_status is required');



export function webhookRoutes(live: LiveEvents, now: () => number): RouteDef[] {
  const checkUrl = async (u: string): Promise<void> => {
    try {
      await live.guard.checkUrl(u);
    } catch (e) {
      if (e instanceof OutboundRefused) throw badRequest('webhook_url_not_allowed', `webhook_url: ${e.message}`);
      throw e;
    }
  };
  const load = async (c: Ctx) => {
    const w = await live.store.getWebhook(teamPrincipalOf(c).teamId, uuidParam(c, 'webhookId'));
    if (!w) throw notFound('webhook', 'webhook_not_found');
    return w;
  };
  return [
    {
      method: 'POST',
      path: '/webhooks',
      doc: { summary: 'Create a webhook (https only)', tags: ['webhooks'], body: createBody, responses: { 200: D.IdResult } },
      auth: MANAGE,
      handler: async (c) => {
        const b = parseBody(createBody, c.body);
        await checkUrl(b.webhook_url);
        const p = teamPrincipalOf(c);
        const id = await live.store.createWebhook({ teamId: p.teamId, displayName: b.display_name, url: b.webhook_url, events: [...new Set(b.webhook_events)], createdBy: p.userId ?? null }, auditOf(c, 'webhook.create', 'webhook'));
        return { id };
      },
    },
    {
      method: 'GET',
      path: '/webhooks',
      doc: { summary: 'List webhooks', tags: ['webhooks'], paged: true, responses: { 200: D.pageOf('webhook_list', D.Webhook) } },
      auth: READ,
      handler: async (c) => {
        const pg = parsePage(c.query);
        const r = await live.store.listWebhooks(teamPrincipalOf(c).teamId, pg.perPage, pg.offset);
        return paged('webhook_list', r.rows.map((w) => webhookView(w, false)), pg, r.total);
      },
    },
    { method: 'GET', path: '/webhooks/{webhookId}', auth: MANAGE, doc: { summary: 'Get a webhook (with signing_secret)', tags: ['webhooks'], responses: { 200: D.WebhookDetail } }, handler: async (c) => webhookView(await load(c), true) },
    {
      method: 'PUT',
      path: '/webhooks/{webhookId}',
      doc: { summary: 'Update a webhook (disabling it drops its pending and retrying deliveries)', tags: ['webhooks'], body: updateBody, responses: { 200: D.IdResult } },
      auth: MANAGE,
      handler: async (c) => {
        const id = uuidParam(c, 'webhookId');
        const b = parseBody(updateBody, c.body);
        if (b.webhook_url !== undefined) await checkUrl(b.webhook_url);
        const ok = await live.store.updateWebhook(
          teamPrincipalOf(c).teamId,
          id,
          { displayName: b.display_name, url: b.webhook_url, events: b.webhook_events ? [...new Set(b.webhook_events)] : undefined, status: b.webhook_status },
          now(),
          auditOf(c, 'webhook.update', 'webhook', id),
        );
        if (!ok) throw notFound('webhook', 'webhook_not_found');
        return { id };
      },
    },
    {
      method: 'DELETE',
      path: '/webhooks/{webhookId}',
      doc: { summary: 'Delete a webhook', tags: ['webhooks'], responses: { 200: D.Success } },
      auth: MANAGE,
      handler: async (c) => {
        const id = uuidParam(c, 'webhookId');
        if (!(await live.store.deleteWebhook(teamPrincipalOf(c).teamId, id, auditOf(c, 'webhook.delete', 'webhook', id)))) throw notFound('webhook', 'webhook_not_found');
        return { is_success: true };
      },
    },
    {
      method: 'GET',
      path: '/webhooks/{webhookId}/deliveries',
      doc: { summary: 'List a webhook\'s deliveries', tags: ['webhooks'], paged: true, query: z.object({ delivery_status: z.enum(DELIVERY_STATUSES).optional() }), responses: { 200: D.pageOf('delivery_list', D.WebhookDelivery) } },
      auth: READ,
      handler: async (c) => {
        const pg = parsePage(c.query);
        const status = c.query.get('delivery_status') || undefined;
        if (status !== undefined && !(DELIVERY_STATUSES as readonly string[]).includes(status)) throw invalidParameter(`delivery_status: must be one of ${DELIVERY_STATUSES.join(', ')}`);
        const w = await load(c);
        const r = await live.store.listDeliveries(w.team_id, w.id, status, pg.perPage, pg.offset);
        return paged('delivery_list', r.rows.map(deliveryView), pg, r.total);
      },
    },
    {
      method: 'POST',
      path: '/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver',
      doc: { summary: 'Redeliver a delivery', tags: ['webhooks'], responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => {
        const w = await load(c);
        const d = await live.store.getDelivery(w.team_id, w.id, uuidParam(c, 'deliveryId'));
        if (!d) throw notFound('delivery', 'delivery_not_found');
        if (w.webhook_status !== 'active') throw conflict('webhook_disabled', 'the webhook is disabled; enable it before redelivering');
        const id = await live.store.redeliver(d, now(), live.dispatcher.maxAttempts, auditOf(c, 'webhook.redeliver', 'webhook', w.id));
        live.dispatcher.poke();
        return { id };
      },
    },
  ];
}
