/**
 * The team custom node registry (management surface: JWT or dk-). Every member reads; presign,
 * create and delete need admin. See docs/api.md. The use cases are src/app/registry.ts (and the
 * presign, src/app/uploads.ts).
 */
import { nodeCreateSchema } from '../../files/registry.js';
import { presignBodySchema } from '../../files/staging.js';
import type { NodeUseCases } from '../../app/registry.js';
import type { UploadUseCases } from '../../app/uploads.js';
import { parsePage } from '../../shared/pagination.js';
import type { RouteDef } from '../http.js';
import { REGISTRY_MANAGE, REGISTRY_READ } from './models.js';
import { auditOf, teamPrincipalOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';

export function nodeRoutes(d: { nodes: NodeUseCases; uploads: UploadUseCases }): RouteDef[] {
  const { nodes } = d;
  return [
    { method: 'POST', path: '/nodes/presign', auth: REGISTRY_MANAGE, doc: { summary: 'Presign a custom node package upload', tags: ['nodes'], body: presignBodySchema, responses: { 200: D.StoragePresign } }, handler: async (c) => d.uploads.presign(teamPrincipalOf(c), 'node', c.body, 'storage_key') },
    { method: 'POST', path: '/nodes', auth: REGISTRY_MANAGE, doc: { summary: 'Register a custom node package', tags: ['nodes'], body: nodeCreateSchema, responses: { 200: D.IdResult }, errors: [409] }, handler: async (c) => nodes.createNode(teamPrincipalOf(c), c.body, auditOf(c, 'node.create', 'node')) },
    { method: 'GET', path: '/nodes', auth: REGISTRY_READ, doc: { summary: 'List custom node packages', tags: ['nodes'], paged: true, responses: { 200: D.pageOf('node_list', D.CustomNode) } }, handler: async (c) => nodes.listNodes(teamPrincipalOf(c), parsePage(c.query)) },
    { method: 'GET', path: '/nodes/{nodeId}', auth: REGISTRY_READ, doc: { summary: 'Get a custom node package', tags: ['nodes'], responses: { 200: D.CustomNode } }, handler: async (c) => nodes.getNode(teamPrincipalOf(c), uuidParam(c, 'nodeId')) },
    { method: 'DELETE', path: '/nodes/{nodeId}', auth: REGISTRY_MANAGE, doc: { summary: 'Delete a custom node package', tags: ['nodes'], responses: { 200: D.Success } }, handler: async (c) => nodes.deleteNode(teamPrincipalOf(c), uuidParam(c, 'nodeId'), auditOf(c, 'node.delete', 'node', uuidParam(c, 'nodeId'))) },
  ];
}
