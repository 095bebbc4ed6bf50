import { teamOf, uuidParam } from '../params.js';
/**
 * The team model registry (management surface: JWT or dk-). Every member reads; creating,
 * presigning, updating and deleting need admin (like workflows). See docs/api.md.
 */
import type { FileStaging } from '../../files/staging.js';
import { MODEL_STATUSES, modelJson, type ModelRegistry } from '../../files/registry.js';
import { invalidParameter } from '../../shared/errors.js';
import { paged, parsePage } from '../../shared/pagination.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { callerOf, presignHandler } from './files.js';
import * as D from '../openapi/schemas.js';
import { z } from 'zod';
import { presignBodySchema } from '../../files/staging.js';
import { modelCreateSchema, modelUpdateSchema } from '../../files/registry.js';

export const REGISTRY_READ: RouteAuth = { kinds: ['user', 'device'], team: true };
export const REGISTRY_MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };



export function modelRoutes(d: { models: ModelRegistry; staging: FileStaging }): RouteDef[] {
  return [
    { method: 'POST', path: '/models/presign', auth: REGISTRY_MANAGE, doc: { summary: 'Presign a model file upload', tags: ['models'], body: presignBodySchema, responses: { 200: D.StoragePresign } }, handler: presignHandler(d.staging, 'model', 'storage_key') },
    { method: 'POST', path: '/models', auth: REGISTRY_MANAGE, doc: { summary: 'Register a model', tags: ['models'], body: modelCreateSchema, responses: { 200: D.IdResult }, errors: [409] }, handler: async (c) => ({ id: (await d.models.create(callerOf(c), c.body)).id }) },
    {
      method: 'GET',
      path: '/models',
      doc: { summary: 'List models', tags: ['models'], paged: true, query: z.object({ model_status: z.enum(MODEL_STATUSES).optional(), model_type: z.string().optional() }), responses: { 200: D.pageOf('model_list', D.Model) } },
      auth: REGISTRY_READ,
      handler: async (c) => {
        const pg = parsePage(c.query);
        const status = c.query.get('model_status') || undefined;
        if (status !== undefined && !(MODEL_STATUSES as readonly string[]).includes(status)) throw invalidParameter(`model_status: must be one of ${MODEL_STATUSES.join(', ')}`);
        const modelType = c.query.get('model_type') || undefined;
        const r = await d.models.list(teamOf(c), { status, modelType }, pg.perPage, pg.offset);
        return paged('model_list', r.rows.map(modelJson), pg, r.total);
      },
    },
    { method: 'GET', path: '/models/{modelId}', auth: REGISTRY_READ, doc: { summary: 'Get a model', tags: ['models'], responses: { 200: D.Model } }, handler: async (c) => modelJson(await d.models.get(teamOf(c), uuidParam(c, 'modelId'))) },
    { method: 'PUT', path: '/models/{modelId}', auth: REGISTRY_MANAGE, doc: { summary: 'Update a model (only provided fields change)', tags: ['models'], body: modelUpdateSchema, responses: { 200: D.IdResult }, errors: [409] }, handler: async (c) => ({ id: (await d.models.update(teamOf(c), uuidParam(c, 'modelId'), c.body)).id }) },
    {
      method: 'DELETE',
      path: '/models/{modelId}',
      doc: { summary: 'Delete a model', tags: ['models'], responses: { 200: D.Success } },
      auth: REGISTRY_MANAGE,
      handler: async (c) => {
        await d.models.delete(teamOf(c), uuidParam(c, 'modelId'));
        return { is_success: true };
      },
    },
  ];
}
