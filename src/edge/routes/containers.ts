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
 * whichever node it lives; 409 invalid_state when the state does not allow the operation. The use
 * cases are src/app/containers.ts.
 */
import { CreateServiceBody, UpdateServiceBody } from '../../domain/containers/schema.js';
import type { ContainerUseCases } from '../../app/containers.js';
import { parsePage } from '../../shared/pagination.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, parseBody, teamPrincipalOf, uuidParam } from '../params.js';
import type { Gateway } from './gateway.js';
import * as D from '../openapi/schemas.js';

const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };
const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

export interface ContainerRouteDeps {
  containers: ContainerUseCases;
  /** The transparent proxy of /r/containers/{slug}/ (the container's own root). */
  gateway: Pick<Gateway, 'proxyRoot'>;
}

export function containerRoutes(d: ContainerRouteDeps): RouteDef[] {
  const app = d.containers;
  const op = (name: 'deploy' | 'start' | 'stop' | 'undeploy'): RouteDef => ({
    method: 'POST',
    path: `/containers/{serviceId}/${name}`,
    auth: MANAGE,
    doc: { summary: `${name[0]!.toUpperCase()}${name.slice(1)} a container service`, tags: ['containers'], responses: { 200: D.ServiceOp }, errors: [409] },
    handler: async (c) => app.operate(teamPrincipalOf(c), uuidParam(c, 'serviceId'), name, (id) => auditOf(c, `container.${name}`, 'container', id)),
  });
  const list = async (c: Ctx): Promise<unknown> => app.listServices(teamPrincipalOf(c), parsePage(c.query));
  return [
    {
      method: 'POST',
      path: '/containers',
      doc: { summary: 'Create a container service (an external_url the outbound guard refuses is a 400)', tags: ['containers'], body: CreateServiceBody, responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => app.createService(teamPrincipalOf(c), parseBody(CreateServiceBody, c.body), auditOf(c, 'container.create', 'container')),
    },
    { method: 'GET', path: '/containers', auth: READ, handler: list, doc: { summary: 'List container services', tags: ['containers'], paged: true, responses: { 200: D.pageOf('container_list', D.ContainerService) } } },
    {
      method: 'GET',
      path: '/containers/{serviceId}',
      doc: { summary: 'Get a container service (with instance_list)', tags: ['containers'], responses: { 200: D.ContainerService } },
      auth: READ,
      handler: async (c) => app.getService(teamPrincipalOf(c), uuidParam(c, 'serviceId')),
    },
    {
      method: 'PUT',
      path: '/containers/{serviceId}',
      doc: { summary: 'Update a container service (any field but service_type)', tags: ['containers'], body: UpdateServiceBody, responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => {
        const b = parseBody(UpdateServiceBody, c.body);
        return app.updateService(teamPrincipalOf(c), uuidParam(c, 'serviceId'), b, (id) => auditOf(c, 'container.update', 'container', id));
      },
    },
    {
      method: 'DELETE',
      path: '/containers/{serviceId}',
      doc: { summary: 'Delete a container service (created, stopped or failed)', tags: ['containers'], responses: { 200: D.Success }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => app.deleteService(teamPrincipalOf(c), uuidParam(c, 'serviceId'), (id) => auditOf(c, 'container.delete', 'container', id)),
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
        res.json(200, await app.serviceBySlug(teamPrincipalOf(c), c.params.serviceSlug ?? ''));
      },
    },
  ];
}
