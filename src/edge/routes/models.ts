import { auditOf, teamPrincipalOf, uuidParam } from '../params.js';
/**
 * The team model registry (management surface: JWT or dk-). Every member reads; creating,
 * presigning, updating and deleting need admin (like workflows). See docs/api.md. The use cases
 * are src/app/registry.ts (and the presign, src/app/uploads.ts).
 */
import { MODEL_STATUSES, modelCreateSchema, modelUpdateSchema } from '../../files/registry.js';
import { presignBodySchema } from '../../files/staging.js';
import type { ModelUseCases } from '../../app/registry.js';
import type { UploadUseCases } from '../../app/uploads.js';
import { parsePage } from '../../shared/pagination.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import * as D from '../openapi/schemas.js';
import { z } from 'zod';

export const REGISTRY_READ: RouteAuth = { kinds: ['user', 'device'], team: true };
export const REGISTRY_MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };

export function modelRoutes(d: { models: ModelUseCases; uploads: UploadUseCases }): RouteDef[] {
  const { models } = d;
  return [
    { method: 'POST', path: '/models/presign', auth: REGISTRY_MANAGE, doc: { summary: 'Presign a model file upload', tags: ['models'], body: presignBodySchema, responses: { 200: D.StoragePresign } }, handler: async (c) => d.uploads.presign(teamPrincipalOf(c), 'model', c.body, 'storage_key') },
    { method: 'POST', path: '/models', auth: REGISTRY_MANAGE, doc: { summary: 'Register a model', tags: ['models'], body: modelCreateSchema, responses: { 200: D.IdResult }, errors: [409] }, handler: async (c) => models.createModel(teamPrincipalOf(c), c.body, auditOf(c, 'model.create', 'model')) },
    {
      method: 'GET',
      path: '/models',
      doc: { summary: 'List models', tags: ['models'], paged: true, query: z.object({ model_status: z.enum(MODEL_STATUSES).optional(), model_type: z.string().optional() }), responses: { 200: D.pageOf('model_list', D.Model) } },
      auth: REGISTRY_READ,
      handler: async (c) => {
        const pg = parsePage(c.query);
        return models.listModels(teamPrincipalOf(c), pg, { status: c.query.get('model_status') || undefined, modelType: c.query.get('model_type') || undefined });
      },
    },
    { method: 'GET', path: '/models/{modelId}', auth: REGISTRY_READ, doc: { summary: 'Get a model', tags: ['models'], responses: { 200: D.Model } }, handler: async (c) => models.getModel(teamPrincipalOf(c), uuidParam(c, 'modelId')) },
    { method: 'PUT', path: '/models/{modelId}', auth: REGISTRY_MANAGE, doc: { summary: 'Update a model (only provided fields change)', tags: ['models'], body: modelUpdateSchema, responses: { 200: D.IdResult }, errors: [409] }, handler: async (c) => models.updateModel(teamPrincipalOf(c), uuidParam(c, 'modelId'), c.body, auditOf(c, 'model.update', 'model', uuidParam(c, 'modelId'))) },
    { method: 'DELETE', path: '/models/{modelId}', auth: REGISTRY_MANAGE, doc: { summary: 'Delete a model', tags: ['models'], responses: { 200: D.Success } }, handler: async (c) => models.deleteModel(teamPrincipalOf(c), uuidParam(c, 'modelId'), auditOf(c, 'model.delete', 'model', uuidParam(c, 'modelId'))) },
  ];
}
