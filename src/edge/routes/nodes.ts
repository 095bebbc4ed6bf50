/**
 * The team custom node registry (management surface: JWT or dk-). Every member reads; presign,
 * create and delete need admin. See docs/api.md.
 */
import type { FileStaging } from '../../files/staging.js';
import { nodeJson, type NodeRegistry } from '../../files/registry.js';
import { paged, parsePage } from '../../shared/pagination.js';
import type { RouteDef } from '../http.js';
import type { TeamPrincipal } from '../principal.js';
import { callerOf, presignHandler } from './files.js';
import { idParam, REGISTRY_MANAGE, REGISTRY_READ } from './models.js';

export function nodeRoutes(d: { nodes: NodeRegistry; staging: FileStaging }): RouteDef[] {
  return [
    { method: 'POST', path: '/nodes/presign', auth: REGISTRY_MANAGE, handler: presignHandler(d.staging, 'node', 'storage_key') },
    { method: 'POST', path: '/nodes', auth: REGISTRY_MANAGE, handler: async (c) => ({ id: (await d.nodes.create(callerOf(c), c.body)).id }) },
    {
      method: 'GET',
      path: '/nodes',
      auth: REGISTRY_READ,
      handler: async (c) => {
        const pg = parsePage(c.query);
        const r = await d.nodes.list((c.principal as TeamPrincipal).teamId, pg.perPage, pg.offset);
        return paged('node_list', r.rows.map(nodeJson), pg, r.total);
      },
    },
    { method: 'GET', path: '/nodes/{nodeId}', auth: REGISTRY_READ, handler: async (c) => nodeJson(await d.nodes.get((c.principal as TeamPrincipal).teamId, idParam(c, 'nodeId'))) },
    {
      method: 'DELETE',
      path: '/nodes/{nodeId}',
      auth: REGISTRY_MANAGE,
      handler: async (c) => {
        await d.nodes.delete((c.principal as TeamPrincipal).teamId, idParam(c, 'nodeId'));
        return { is_success: true };
      },
    },
  ];
}
