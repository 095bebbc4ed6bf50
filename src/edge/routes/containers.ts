/**
 * Container services (docs/api.md "Container services"). Management: user JWT or dk- of a team
 * member (sk- refused); reads for members, writes and lifecycle operations for admins. Runtime
 * (J, S, D): the list and one service by slug; sk- callers see env values blanked.
 *
 *   POST   /containers                          create -> {id}
 *   GET    /containers                          {container_list, page_meta}
 *   GET    /containers/{serviceId}              the service with instance_list
 *   PUT    /containers/{serviceId}              any field but service_type -> {id}
 *   DELETE /containers/{serviceId}              {is_success} (created, stopped or failed)
 *   POST   /containers/{serviceId}/deploy|start|stop|undeploy  {is_success, service_status}
 *   GET    /r/containers                        {container_list, page_meta}
 *   GET    /r/containers/{serviceSlug}          the service (a trailing slash proxies the container's /)
 *
 * Lifecycle operations are asked of the service's actor (the only writer of its state), on
 * whichever node it lives; 409 invalid_state when the state does not allow the operation.
 */
import { CreateServiceBody, UpdateServiceBody, checkTypeRules, serviceJson, type ServiceRecord } from '../../domain/containers/schema.js';
import { CONTAINER_SERVICE } from '../../actors/index.js';
import type { ActorSystemPort } from '../../actors/ports.js';
import type { PgContainerStore } from '../../persistence/container-store.js';
import { OutboundRefused, type OutboundGuard } from '../../events/outbound.js';
import { badRequest, fromZodIssues, notFound } from '../../shared/errors.js';
import { paged, parsePage } from '../../shared/pagination.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, parseBody, teamPrincipalOf, uuidParam } from '../params.js';
import type { Gateway } from './gateway.js';
import * as D from '../openapi/schemas.js';

const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };
const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

export interface ContainerRouteDeps {
  store: PgContainerStore;
  actors: ActorSystemPort;
  /** Whether a vault credential exists in the team (external_auth_credential_id). */
  credentialExists(teamId: string, id: string): Promise<boolean>;
  /** The team's services changed (gateway routing tables on every node reload). */
  changed(teamId: string): void;
  gateway: Gateway;
  /** The outbound guard: an external_url it refuses is a 400 at create and update, as for webhooks (and still refused at use). */
  guard: Pick<OutboundGuard, 'checkUrl'>;
}

/**
 * GET /r/containers/{serviceSlug}: one service of the team by slug, env values blanked for sk-
 * (`reduced`); 404 service_not_found. The MCP tool get_container_service calls this too.
 */
export async function runtimeServiceBySlug(store: Pick<PgContainerStore, 'bySlug'>, teamId: string, slug: string, reduced: boolean): Promise<Record<string, unknown>> {
  const s = await store.bySlug(teamId, slug);
  if (!s) throw notFound(`container service ${slug}`, 'service_not_found');
  return serviceJson(s, reduced);
}

export function containerRoutes(d: ContainerRouteDeps): RouteDef[] {
  const load = async (c: Ctx): Promise<ServiceRecord> => {
    const s = await d.store.get(teamPrincipalOf(c).teamId, uuidParam(c, 'serviceId'));
    if (!s) throw notFound('container service', 'service_not_found');
    return s;
  };
  const checkCredential = async (teamId: string, id: string | null | undefined): Promise<void> => {
    if (id && !(await d.credentialExists(teamId, id))) throw badRequest('credential_not_found', 'external_auth_credential_id: no such credential in this team\'s vault');
  };
  const op = (name: 'deploy' | 'start' | 'stop' | 'undeploy'): RouteDef => ({
    method: 'POST',
    path: `/containers/{serviceId}/${name}`,
    auth: MANAGE,
    doc: { summary: `${name[0]!.toUpperCase()}${name.slice(1)} a container service`, tags: ['containers'], responses: { 200: D.ServiceOp }, errors: [409] },
    handler: async (c) => {
      const s = await load(c);
      const r = await d.actors.ask({ kind: CONTAINER_SERVICE, id: s.id }, { type: 'op', op: name, audit: auditOf(c, `container.${name}`, 'container', s.id) });
      return { is_success: true, service_status: r.status };
    },
  });
  const checkExternalUrl = async (u: string | undefined): Promise<void> => {
    if (u === undefined) return;
    try {
      await d.guard.checkUrl(u);
    } catch (e) {
      if (e instanceof OutboundRefused) throw badRequest('external_url_not_allowed', `external_url: ${e.message}`);
      throw e;
    }
  };
  const reduced = (c: Ctx): boolean => teamPrincipalOf(c).kind === 'integration';
  const list = async (c: Ctx): Promise<unknown> => {
    const pg = parsePage(c.query);
    const r = await d.store.list(teamPrincipalOf(c).teamId, pg.perPage, pg.offset);
    return paged('container_list', r.rows.map((s) => serviceJson(s, reduced(c))), pg, r.total);
  };
  return [
    {
      method: 'POST',
      path: '/containers',
      doc: { summary: 'Create a container service (an external_url the outbound guard refuses is a 400)', tags: ['containers'], body: CreateServiceBody, responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => {
        const b = parseBody(CreateServiceBody, c.body);
        const p = teamPrincipalOf(c);
        await checkExternalUrl(b.external_url);
        await checkCredential(p.teamId, b.external_auth_credential_id);
        const id = await d.store.create(p.teamId, b, p.userId ?? null, auditOf(c, 'container.create', 'container'));
        d.changed(p.teamId);
        return { id };
      },
    },
    { method: 'GET', path: '/containers', auth: READ, handler: list, doc: { summary: 'List container services', tags: ['containers'], paged: true, responses: { 200: D.pageOf('container_list', D.ContainerService) } } },
    {
      method: 'GET',
      path: '/containers/{serviceId}',
      doc: { summary: 'Get a container service (with instance_list)', tags: ['containers'], responses: { 200: D.ContainerService } },
      auth: READ,
      handler: async (c) => {
        const s = await load(c);
        return serviceJson(s, false, await d.store.instances(s.id));
      },
    },
    {
      method: 'PUT',
      path: '/containers/{serviceId}',
      doc: { summary: 'Update a container service (any field but service_type)', tags: ['containers'], body: UpdateServiceBody, responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => {
        const b = parseBody(UpdateServiceBody, c.body);
        const s = await load(c);
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
        if (issues.length) throw fromZodIssues(issues);
        await checkExternalUrl(b.external_url);
        await checkCredential(s.teamId, b.external_auth_credential_id);
        const updated = await d.store.update(s.teamId, s.id, b, auditOf(c, 'container.update', 'container', s.id));
        if (!updated) throw notFound('container service', 'service_not_found');
        d.actors.tell({ kind: CONTAINER_SERVICE, id: s.id }, { type: 'changed' });
        d.changed(s.teamId);
        return { id: s.id };
      },
    },
    {
      method: 'DELETE',
      path: '/containers/{serviceId}',
      doc: { summary: 'Delete a container service (created, stopped or failed)', tags: ['containers'], responses: { 200: D.Success }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => {
        const s = await load(c);
        await d.actors.ask({ kind: CONTAINER_SERVICE, id: s.id }, { type: 'op', op: 'delete', audit: auditOf(c, 'container.delete', 'container', s.id) });
        d.changed(s.teamId);
        return { is_success: true };
      },
    },
    op('deploy'),
    op('start'),
    op('stop'),
    op('undeploy'),
    { method: 'GET', path: '/r/containers', auth: RUNTIME, handler: list, doc: { summary: 'List container services (runtime)', tags: ['runtime', 'containers'], paged: true, responses: { 200: D.pageOf('container_list', D.ContainerService) } } },
    {
      method: 'GET',
      path: '/r/containers/{serviceSlug}',
      doc: { summary: 'Get a container service by slug (runtime)', tags: ['runtime', 'containers'], responses: { 200: D.ContainerService } },
      auth: RUNTIME,
      stream: async (c, res) => {
        // /r/containers/{slug}/ (trailing slash): the container's own root, through the proxy
        if (c.path.endsWith('/')) return d.gateway.proxyRoot(c, res);
        res.json(200, await runtimeServiceBySlug(d.store, teamPrincipalOf(c).teamId, c.params.serviceSlug ?? '', reduced(c)));
      },
    },
  ];
}
