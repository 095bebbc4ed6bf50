/**
 * The webhook use cases (docs/api.md "Webhooks"): create, list, read (the detail carries the
 * signing secret), update (disabling drops pending and retrying deliveries), delete, the delivery
 * log and a redelivery. A webhook URL the outbound guard refuses is a 400 at create and update.
 */
import type { TeamPrincipal } from '../identity/principal.js';
import type { OutboundUrlPolicy } from './ports.js';
import { deliveryView, webhookView, type DeliveryRow, type WebhookEvent, type WebhookRow } from '../events/store.js';
import type { AuditNote } from '../shared/audit.js';
import { badRequest, conflict, notFound } from '../shared/errors.js';
import { paged, type PageRequest } from '../shared/pagination.js';

/** The webhook tables of the events store (src/events/store.ts EventsStore). */
export interface WebhookStore {
  createWebhook(w: { teamId: string; displayName: string; url: string; events: WebhookEvent[]; createdBy: string | null }, audit?: AuditNote): Promise<string>;
  listWebhooks(teamId: string, limit: number, offset: number): Promise<{ rows: WebhookRow[]; total: number }>;
  getWebhook(teamId: string, id: string): Promise<WebhookRow | null>;
  updateWebhook(teamId: string, id: string, p: WebhookPatch, now: number, audit?: AuditNote): Promise<boolean>;
  deleteWebhook(teamId: string, id: string, audit?: AuditNote): Promise<boolean>;
  listDeliveries(teamId: string, webhookId: string, status: string | undefined, limit: number, offset: number): Promise<{ rows: DeliveryRow[]; total: number }>;
  getDelivery(teamId: string, webhookId: string, id: string): Promise<DeliveryRow | null>;
  redeliver(d: DeliveryRow, now: number, maxAttempts: number, audit?: AuditNote): Promise<string>;
}

export interface WebhookPatch {
  displayName?: string | undefined;
  url?: string | undefined;
  events?: WebhookEvent[] | undefined;
  status?: 'active' | 'disabled' | undefined;
}

export interface WebhookDeps {
  store: WebhookStore;
  guard: OutboundUrlPolicy;
  /** The delivery worker: its attempt budget, and a nudge when a delivery was queued. */
  dispatcher: { readonly maxAttempts: number; poke(): void };
  now: () => number;
}

export class WebhookUseCases {
  constructor(private readonly d: WebhookDeps) {}

  private async checkUrl(u: string): Promise<void> {
    const refused = await this.d.guard.refusal(u);
    if (refused !== null) throw badRequest('webhook_url_not_allowed', `webhook_url: ${refused}`);
  }

  /** The team's webhook; 404 webhook_not_found. */
  async loadWebhook(p: TeamPrincipal, id: string): Promise<WebhookRow> {
    const w = await this.d.store.getWebhook(p.teamId, id);
    if (!w) throw notFound('webhook', 'webhook_not_found');
    return w;
  }

  async createWebhook(p: TeamPrincipal, w: { displayName: string; url: string; events: WebhookEvent[] }, audit: AuditNote): Promise<{ id: string }> {
    await this.checkUrl(w.url);
    const id = await this.d.store.createWebhook({ teamId: p.teamId, displayName: w.displayName, url: w.url, events: [...new Set(w.events)], createdBy: p.userId ?? null }, audit);
    return { id };
  }

  async listWebhooks(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    const r = await this.d.store.listWebhooks(p.teamId, page.perPage, page.offset);
    return paged('webhook_list', r.rows.map((w) => webhookView(w, false)), page, r.total);
  }

  /** The detail record, with the signing secret. */
  async getWebhook(p: TeamPrincipal, id: string): Promise<Record<string, unknown>> {
    return webhookView(await this.loadWebhook(p, id), true);
  }

  async updateWebhook(p: TeamPrincipal, id: string, patch: WebhookPatch, audit: AuditNote): Promise<{ id: string }> {
    if (patch.url !== undefined) await this.checkUrl(patch.url);
    const ok = await this.d.store.updateWebhook(p.teamId, id, { ...patch, events: patch.events ? [...new Set(patch.events)] : undefined }, this.d.now(), audit);
    if (!ok) throw notFound('webhook', 'webhook_not_found');
    return { id };
  }

  async deleteWebhook(p: TeamPrincipal, id: string, audit: AuditNote): Promise<{ is_success: true }> {
    if (!(await this.d.store.deleteWebhook(p.teamId, id, audit))) throw notFound('webhook', 'webhook_not_found');
    return { is_success: true };
  }

  async listDeliveries(p: TeamPrincipal, webhookId: string, status: string | undefined, page: PageRequest): Promise<Record<string, unknown>> {
    const w = await this.loadWebhook(p, webhookId);
    const r = await this.d.store.listDeliveries(w.team_id, w.id, status, page.perPage, page.offset);
    return paged('delivery_list', r.rows.map(deliveryView), page, r.total);
  }

  /** A new delivery of one of the webhook's deliveries (the webhook found with loadWebhook); 409 while it is disabled. */
  async redeliver(w: WebhookRow, deliveryId: string, audit: AuditNote): Promise<{ id: string }> {
    const d = await this.d.store.getDelivery(w.team_id, w.id, deliveryId);
    if (!d) throw notFound('delivery', 'delivery_not_found');
    if (w.webhook_status !== 'active') throw conflict('webhook_disabled', 'the webhook is disabled; enable it before redelivering');
    const id = await this.d.store.redeliver(d, this.d.now(), this.d.dispatcher.maxAttempts, audit);
    this.d.dispatcher.poke();
    return { id };
  }
}
