/**
 * The container service use cases (docs/api.md "Container services"): create, update, delete and
 * the lifecycle operations (asked of the service's actor, the only writer of its state, on
 * whichever node it lives; 409 invalid_state when the state does not allow the operation), the
 * reads (env values blanked for integration callers), and calls into a running service through the
 * gateway (ContainerInvoker), with the lookup of its OpenAPI document.
 */
import type { z } from 'zod';
import { CONTAINER_SERVICE } from '../actors/index.js';
import type { ActorSystemPort } from '../actors/ports.js';
import type { TeamPrincipal } from '../identity/principal.js';
import type { OutboundUrlPolicy } from './ports.js';
import { checkAutoscaleRules, checkTypeRules, serviceJson, type CreateServiceBody, type ServiceInstance, type ServiceRecord, type UpdateServiceBody } from '../domain/containers/schema.js';
import type { AuditNote } from '../shared/audit.js';
import { AppError, badRequest, fromZodIssues, notFound } from '../shared/errors.js';
import { paged, type PageRequest } from '../shared/pagination.js';
import { checkJsonValue, checkPairs } from '../shared/input-hygiene.js';
import { InvokeBody, invokeRequestOf, invokeResultOf, type InvokeRequest, type InvokeResponse, type InvokeResultBody } from '../gateway/invoke.js';

/** The container store (src/persistence/container-store.ts PgContainerStore). */
export interface ContainerServices {
  create(teamId: string, b: CreateServiceBody, createdBy: string | null, audit?: AuditNote): Promise<string>;
  update(teamId: string, id: string, b: UpdateServiceBody, audit?: AuditNote): Promise<ServiceRecord | null>;
  get(teamId: string, id: string): Promise<ServiceRecord | null>;
  bySlug(teamId: string, slug: string): Promise<ServiceRecord | null>;
  list(teamId: string, limit: number, offset: number): Promise<{ rows: ServiceRecord[]; total: number }>;
  instances(serviceId: string): Promise<ServiceInstance[]>;
}

export { INVOKE_METHODS } from '../gateway/invoke.js';

/** A structured call to a running service as a face received it (the body of POST /r/invoke/{slug}). */
export type InvokeCall = z.input<typeof InvokeBody>;

/**
 * The gateway's structured call: routing, instance choice and the response cap
 * (src/gateway/core.ts GatewayCore.invoke implements it).
 */
export interface ContainerInvoker {
  invoke(team: { teamId: string }, slug: string, req: InvokeRequest): Promise<InvokeResponse>;
}

export interface ContainerDeps {
  store: ContainerServices;
  actors: ActorSystemPort;
  /** Whether a vault credential exists in the team (external_auth_credential_id). */
  credentialExists(teamId: string, id: string): Promise<boolean>;
  /** The team's services changed (gateway routing tables on every node reload). */
  changed(teamId: string): void;
  /** The outbound guard: an external_url it refuses is a 400 at create and update, as for webhooks (and still refused at use). */
  guard: OutboundUrlPolicy;
  invoker: ContainerInvoker;
}

export type ServiceOp = 'deploy' | 'start' | 'stop' | 'undeploy';

export interface ServiceOpenApi {
  service_slug: string;
  openapi_url: string;
  status_code: number;
  openapi: unknown;
}

/** Integration (sk-) callers see env values blanked. */
const reduced = (p: TeamPrincipal): boolean => p.kind === 'integration';

export class ContainerUseCases {
  constructor(private readonly d: ContainerDeps) {}

  private async load(p: TeamPrincipal, id: string): Promise<ServiceRecord> {
    const s = await this.d.store.get(p.teamId, id);
    if (!s) throw notFound('container service', 'service_not_found');
    return s;
  }

  private async checkCredential(teamId: string, id: string | null | undefined): Promise<void> {
    if (id && !(await this.d.credentialExists(teamId, id))) throw badRequest('credential_not_found', 'external_auth_credential_id: no such credential in this team\'s vault');
  }

  private async checkExternalUrl(u: string | undefined): Promise<void> {
    if (u === undefined) return;
    const refused = await this.d.guard.refusal(u);
    if (refused !== null) throw badRequest('external_url_not_allowed', `external_url: ${refused}`);
  }

  async createService(p: TeamPrincipal, b: CreateServiceBody, audit: AuditNote): Promise<{ id: string }> {
    await this.checkExternalUrl(b.external_url);
    await this.checkCredential(p.teamId, b.external_auth_credential_id);
    const id = await this.d.store.create(p.teamId, b, p.userId ?? null, audit);
    this.d.changed(p.teamId);
    return { id };
  }

  async listServices(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    const r = await this.d.store.list(p.teamId, page.perPage, page.offset);
    return paged('container_list', r.rows.map((s) => serviceJson(s, reduced(p))), page, r.total);
  }

  /** One service by id, with instance_list. */
  async getService(p: TeamPrincipal, id: string): Promise<Record<string, unknown>> {
    const s = await this.load(p, id);
    return serviceJson(s, false, await this.d.store.instances(s.id));
  }

  /** One service of the team by slug; 404 service_not_found. */
  async serviceBySlug(p: TeamPrincipal, slug: string): Promise<Record<string, unknown>> {
    const s = await this.d.store.bySlug(p.teamId, slug);
    if (!s) throw notFound(`container service ${slug}`, 'service_not_found');
    return serviceJson(s, reduced(p));
  }

  /** Any field but service_type; the type rules hold for the record as it will be. */
  async updateService(p: TeamPrincipal, id: string, b: UpdateServiceBody, audit: (serviceId: string) => AuditNote): Promise<{ id: string }> {
    const s = await this.load(p, id);
    // the type rules hold for the record as it will be
    const merged = {
      service_type: s.type,
      docker_image: b.docker_image ?? (s.image || undefined),
      exposed_port: b.exposed_port ?? (s.exposedPort || undefined),
      external_url: b.external_url ?? (s.externalUrl || undefined),
      external_auth_credential_id: b.external_auth_credential_id !== undefined ? b.external_auth_credential_id : s.externalAuthCredentialId,
    };
    const issues: Array<{ path: string[]; message: string }> = [];
    checkTypeRules(merged, { addIssue: (i) => issues.push(i) });
    // autoscaling: the rules hold for the fields as they will be (max_replicas null turns it off)
    const pick = <T>(v: T | undefined, cur: T): T => (v !== undefined ? v : cur);
    checkAutoscaleRules(
      {
        service_type: s.type,
        min_replicas: pick(b.min_replicas, s.minReplicas),
        max_replicas: pick(b.max_replicas, s.maxReplicas),
        target_inflight_per_replica: pick(b.target_inflight_per_replica, s.targetInflight),
        idle_timeout_s: pick(b.idle_timeout_s, s.idleTimeoutS),
      },
      { addIssue: (i) => issues.push(i) },
    );
    if (issues.length) throw fromZodIssues(issues);
    await this.checkExternalUrl(b.external_url);
    await this.checkCredential(s.teamId, b.external_auth_credential_id);
    const updated = await this.d.store.update(s.teamId, s.id, b, audit(s.id));
    if (!updated) throw notFound('container service', 'service_not_found');
    this.d.actors.tell({ kind: CONTAINER_SERVICE, id: s.id }, { type: 'changed' });
    this.d.changed(s.teamId);
    return { id: s.id };
  }

  /** Deletes a created, stopped or failed service (its actor decides). */
  async deleteService(p: TeamPrincipal, id: string, audit: (serviceId: string) => AuditNote): Promise<{ is_success: true }> {
    const s = await this.load(p, id);
    await this.d.actors.ask({ kind: CONTAINER_SERVICE, id: s.id }, { type: 'op', op: 'delete', audit: audit(s.id) });
    this.d.changed(s.teamId);
    return { is_success: true };
  }

  async operate(p: TeamPrincipal, id: string, op: ServiceOp, audit: (serviceId: string) => AuditNote): Promise<{ is_success: true; service_status: string }> {
    const s = await this.load(p, id);
    const r = await this.d.actors.ask({ kind: CONTAINER_SERVICE, id: s.id }, { type: 'op', op, audit: audit(s.id) });
    return { is_success: true, service_status: r.status };
  }

  /**
   * One call into a running service through the gateway. A gateway refusal (not running, no
   * healthy instance, tunnel failure) is explained for a caller that cannot see the gateway.
   */
  async invokeService(p: TeamPrincipal, slug: string, call: InvokeCall): Promise<InvokeResultBody> {
    // the input checks an HTTP request gets from the edge before any handler (a face other than
    // HTTP parsed this JSON itself), then the invoke body's own schema
    const bad = checkPairs([['serviceSlug', slug]], 'path parameter') ?? checkJsonValue(call);
    if (bad) throw bad;
    const parsed = InvokeBody.safeParse(call);
    if (!parsed.success) throw fromZodIssues(parsed.error.issues);
    try {
      return invokeResultOf(await this.d.invoker.invoke(p, slug, invokeRequestOf(parsed.data)));
    } catch (e) {
      if (!(e instanceof AppError)) throw e;
      if (e.code === 'service_not_running') throw new AppError(e.kind, e.code, `${e.message}: it must be deployed and running before it can be called (the gateway is not available for it)`);
      if (e.kind === 'unavailable' || e.kind === 'bad_gateway' || e.kind === 'deadline_exceeded')
        throw new AppError(e.kind, e.code, `container service ${slug} is not available through the gateway right now: ${e.message}`);
      throw e;
    }
  }

  /** The service's OpenAPI document, fetched from its openapi_url through the gateway (parsed when it is JSON). */
  async serviceOpenApi(p: TeamPrincipal, slug: string): Promise<ServiceOpenApi> {
    const svc = await this.serviceBySlug(p, slug);
    const url = typeof svc.openapi_url === 'string' ? svc.openapi_url : '';
    if (!url) throw new AppError('not_found', 'openapi_not_declared', `container service ${slug} declares no openapi_url`);
    const r = await this.invokeService(p, slug, { method: 'GET', path: url, headers: { accept: 'application/json' } });
    const text = Buffer.from(r.body_base64, 'base64').toString('utf8');
    const status = r.status_code;
    if (status < 200 || status > 299) throw new AppError('bad_gateway', 'openapi_unavailable', `the service answered ${status} for ${url}: ${text.slice(0, 500)}`);
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch {
      doc = text;
    }
    return { service_slug: slug, openapi_url: url, status_code: status, openapi: doc };
  }
}
