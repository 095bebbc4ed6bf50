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
 *
 * The use cases are src/app/webhooks.ts.
 */
import { z } from 'zod';
import { DELIVERY_STATUSES, WEBHOOK_EVENTS } from '../../events/store.js';
import type { WebhookUseCases } from '../../app/webhooks.js';
import { invalidParameter } from '../../shared/errors.js';
import { parsePage } from '../../shared/pagination.js';
import type { RouteDef } from '../http.js';
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

export function webhookRoutes(hooks: WebhookUseCases): RouteDef[] {
  return [
    {
      method: 'POST',
      path: '/webhooks',
      doc: { summary: 'Create a webhook (https only)', tags: ['webhooks'], body: createBody, responses: { 200: D.IdResult } },
      auth: MANAGE,
      handler: async (c) => {
        const b = parseBody(createBody, c.body);
        return hooks.createWebhook(teamPrincipalOf(c), { displayName: b.display_name, url: b.webhook_url, events: b.webhook_events }, auditOf(c, 'webhook.create', 'webhook'));
      },
    },
    {
      method: 'GET',
      path: '/webhooks',
      doc: { summary: 'List webhooks', tags: ['webhooks'], paged: true, responses: { 200: D.pageOf('webhook_list', D.Webhook) } },
      auth: READ,
      handler: async (c) => hooks.listWebhooks(teamPrincipalOf(c), parsePage(c.query)),
    },
    { method: 'GET', path: '/webhooks/{webhookId}', auth: MANAGE, doc: { summary: 'Get a webhook (with signing_secret)', tags: ['webhooks'], responses: { 200: D.WebhookDetail } }, handler: async (c) => hooks.getWebhook(teamPrincipalOf(c), uuidParam(c, 'webhookId')) },
    {
      method: 'PUT',
      path: '/webhooks/{webhookId}',
      doc: { summary: 'Update a webhook (disabling it drops its pending and retrying deliveries)', tags: ['webhooks'], body: updateBody, responses: { 200: D.IdResult } },
      auth: MANAGE,
      handler: async (c) => {
        const id = uuidParam(c, 'webhookId');
        const b = parseBody(updateBody, c.body);
        return hooks.updateWebhook(teamPrincipalOf(c), id, { displayName: b.display_name, url: b.webhook_url, events: b.webhook_events, status: b.webhook_status }, auditOf(c, 'webhook.update', 'webhook', id));
      },
    },
    {
      method: 'DELETE',
      path: '/webhooks/{webhookId}',
      doc: { summary: 'Delete a webhook', tags: ['webhooks'], responses: { 200: D.Success } },
      auth: MANAGE,
      handler: async (c) => {
        const id = uuidParam(c, 'webhookId');
        return hooks.deleteWebhook(teamPrincipalOf(c), id, auditOf(c, 'webhook.delete', 'webhook', id));
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
        return hooks.listDeliveries(teamPrincipalOf(c), uuidParam(c, 'webhookId'), status, pg);
      },
    },
    {
      method: 'POST',
      path: '/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver',
      doc: { summary: 'Redeliver a delivery', tags: ['webhooks'], responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => {
        const w = await hooks.loadWebhook(teamPrincipalOf(c), uuidParam(c, 'webhookId'));
        return hooks.redeliver(w, uuidParam(c, 'deliveryId'), auditOf(c, 'webhook.redeliver', 'webhook', w.id));
      },
    },
  ];
}
