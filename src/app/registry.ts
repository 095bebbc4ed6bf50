/**
 * The team registries' use cases: models (/models) and custom node packages (/nodes). A record is
 * created from a storage_key staged by the registry's presign (src/app/uploads.ts) and uploaded;
 * every member reads, writes need admin (the routes' auth). The registries themselves (measuring
 * the object, consuming the staged row, telling agents to sync) are src/files/registry.ts.
 */
import type { TeamPrincipal } from '../identity/principal.js';
import { modelJson, nodeJson, MODEL_STATUSES, type ModelRecord, type NodeRecord } from '../files/registry.js';
import type { Caller } from '../files/staging.js';
import type { AuditNote } from '../shared/audit.js';
import { invalidParameter } from '../shared/errors.js';
import { paged, type PageRequest } from '../shared/pagination.js';
import { fileCaller } from './uploads.js';

/** What models and nodes share (src/files/registry.ts Registry): create from a staged key, get, delete; missing is 404. */
interface RegistryPort<R> {
  create(caller: Caller, body: unknown, audit?: AuditNote): Promise<R>;
  get(teamId: string, id: string): Promise<R>;
  delete(teamId: string, id: string, audit?: AuditNote): Promise<void>;
}

/** The model registry (src/files/registry.ts ModelRegistry). */
export interface ModelRegistryPort extends RegistryPort<ModelRecord> {
  list(teamId: string, f: { status?: string | undefined; modelType?: string | undefined }, limit: number, offset: number): Promise<{ rows: ModelRecord[]; total: number }>;
  update(teamId: string, id: string, body: unknown, audit?: AuditNote): Promise<ModelRecord>;
}

/** The custom node registry (src/files/registry.ts NodeRegistry). */
export interface NodeRegistryPort extends RegistryPort<NodeRecord> {
  list(teamId: string, limit: number, offset: number): Promise<{ rows: NodeRecord[]; total: number }>;
}

export interface ModelListFilter {
  /** Validated here: one of MODEL_STATUSES (400 otherwise). */
  status?: string | undefined;
  modelType?: string | undefined;
}

export class ModelUseCases {
  constructor(private readonly models: ModelRegistryPort) {}

  /** The body (modelCreateSchema) is validated by the registry: 400 naming the field, 409 for a used key or path. */
  async createModel(p: TeamPrincipal, body: unknown, audit: AuditNote): Promise<{ id: string }> {
    return { id: (await this.models.create(fileCaller(p), body, audit)).id };
  }

  async listModels(p: TeamPrincipal, page: PageRequest, f: ModelListFilter): Promise<Record<string, unknown>> {
    if (f.status !== undefined && !(MODEL_STATUSES as readonly string[]).includes(f.status)) throw invalidParameter(`model_status: must be one of ${MODEL_STATUSES.join(', ')}`);
    const r = await this.models.list(p.teamId, { status: f.status, modelType: f.modelType }, page.perPage, page.offset);
    return paged('model_list', r.rows.map(modelJson), page, r.total);
  }

  async getModel(p: TeamPrincipal, id: string): Promise<Record<string, unknown>> {
    return modelJson(await this.models.get(p.teamId, id));
  }

  /** Only the provided fields change. */
  async updateModel(p: TeamPrincipal, id: string, body: unknown, audit: AuditNote): Promise<{ id: string }> {
    return { id: (await this.models.update(p.teamId, id, body, audit)).id };
  }

  async deleteModel(p: TeamPrincipal, id: string, audit: AuditNote): Promise<{ is_success: true }> {
    await this.models.delete(p.teamId, id, audit);
    return { is_success: true };
  }
}

export class NodeUseCases {
  constructor(private readonly nodes: NodeRegistryPort) {}

  async createNode(p: TeamPrincipal, body: unknown, audit: AuditNote): Promise<{ id: string }> {
    return { id: (await this.nodes.create(fileCaller(p), body, audit)).id };
  }

  async listNodes(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    const r = await this.nodes.list(p.teamId, page.perPage, page.offset);
    return paged('node_list', r.rows.map(nodeJson), page, r.total);
  }

  async getNode(p: TeamPrincipal, id: string): Promise<Record<string, unknown>> {
    return nodeJson(await this.nodes.get(p.teamId, id));
  }

  async deleteNode(p: TeamPrincipal, id: string, audit: AuditNote): Promise<{ is_success: true }> {
    await this.nodes.delete(p.teamId, id, audit);
    return { is_success: true };
  }
}
