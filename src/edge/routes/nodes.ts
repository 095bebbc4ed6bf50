/**
 * The team custom node registry (management surface: JWT or dk-). Every member reads; presign,
 * create and delete need admin. See docs/api.md.
 */
import type { FileStaging } from '../../files/staging.js';
import { nodeJson, type NodeRegistry } from '../../files/registry.js';
import { paged, parsePage } from '../../shared/pagination.js';
import type { RouteDef } from '../http.js';
import { callerOf, presignHandler } from './files.js';
import { REGISTRY_MANAGE, REGISTRY_READ } from './models.js';
import { teamOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';
import { presignBodySchema } from '../../files/staging.js';
import { nodeCreateSchema } from '../../files/registry.js';

export function nodeRoutes(d: { nodes: NodeRegistry; staging: FileStaging }): RouteDef[] {
  return [
    { method: 'POST', path: '/nodes/presign', auth: REGISTRY_MANAGE, doc: { summary: 'Presign a custom node package upload', tags: ['nodes'], body: presignBodySchema, responses: { 200: D.StoragePresign } }, handler: presignHandler(d.staging, 'node', 'storage_key') },
    { method: 'POST', path: '/nodes', auth: REGISTRY_MANAGE, doc: { summary: 'Register a custom node package', tags: ['nodes'], body: nodeCreateSchema, responses: { 200: D.IdResult }, errors: [409] }, handler: async (c) => ({ id: (await d.nodes.create(callerOf(c), c.body)).id }) },
    {
      method: 'GET',
      path: '/nodes',
      doc: { summary: 'List custom node packages', tags: ['nodes'], paged: true, responses: { 200: D.pageOf('node_list', D.CustomNode) } },
      auth: REGISTRY_READ,
      handler: async (c) => {
        const pg = parsePage(c.query);
        const r = await d.nodes.list(teamOf(c), pg.perPage, pg.offset);
        return paged('node_list', r.rows.map(nodeJson), pg, r.total);
      },
    },
    { method: 'GET', path: '/nodes/{nodeId}', auth: REGISTRY_READ, doc: { summary: 'Get a custom node package', tags: ['nodes'], responses: { 200: D.CustomNode } }, handler: async (c) => nodeJson(await d.nodes.get(teamOf(c), uuidParam(c, 'nodeId'))) },
    {
      method: 'DELETE',
      path: '/nodes/{nodeId}',
      doc: { summary: 'Delete a custom node package', tags: ['nodes'], responses: { 200: D.Success } },
      auth: REGISTRY_MANAGE,
      handler: async (c) => {
        await d.nodes.delete(teamOf(c), uuidParam(c, 'nodeId'));
        return { is_success: true };
      },
    },
  ];
}
