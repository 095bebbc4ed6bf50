/**
 * The team model registry (/models) and custom node registry (/nodes).
 *
 * A model (or node package) is created from a storage_key staged by POST /models/presign (or
 * /nodes/presign) and uploaded (single PUT or multipart). On create the object is streamed once to
 * measure its size and SHA-256 (never buffered); a given sha256 must match, file_size must match.
 * The staged row is consumed, the registry owns the object from then on; DELETE removes it.
 * Active models and nodes are what agents sync (sync.ts); every change calls onChange(team).
 * model_path and package_name follow the rule agents apply to the manifest
 * (src/protocol/model-path.ts): what is accepted here, every agent can place.
 */
import { createHash } from 'node:crypto';
import type { AuditNote } from '../shared/audit.js';
import { z } from 'zod';
import type { ObjectStore } from '../storage/port.js';
import { modelPathSchema } from '../domain/workflows/schema.js';
import { NODE_VERSION_RE, NODE_VERSION_RULE, PACKAGE_NAME_RE, PACKAGE_NAME_RULE } from '../protocol/model-path.js';
import { AppError, conflict, fromZodIssues, invalidParameter, notFound } from '../shared/errors.js';
import { uuidv7 } from '../shared/ids.js';
import type { Logger } from '../shared/logger.js';
import type { Caller, FileStaging } from './staging.js';
import type { FilesStore, ModelRecord, NodeRecord } from './store.js';

const parse = <T>(s: z.ZodType<T>, body: unknown): T => {
  const r = s.safeParse(body ?? {});
  if (!r.success) throw fromZodIssues(r.error.issues);
  return r.data;
};

const displayName = z.string().min(1, 'must not be empty').max(255, 'must be at most 255 characters');
const sha256Schema = z
  .string()
  .regex(/^[A-Fa-f0-9]{64}$/, 'must be 64 hex characters (SHA-256)')
  .transform((s) => s.toLowerCase());
const fileSize = z.number().int('must be an integer').min(1, 'must be at least 1 byte');
const storageKey = z.string().min(1, 'must not be empty').max(1024, 'must be at most 1024 characters');

export const MODEL_STATUSES = ['active', 'disabled'] as const;
export const NODE_STATUSES = ['active', 'disabled'] as const;

export const modelCreateSchema = z.strictObject({
  display_name: displayName,
  model_type: z.string().min(1, 'must not be empty').max(50, 'must be at most 50 characters'),
  model_path: modelPathSchema,
  storage_key: storageKey,
  file_size: fileSize,
  sha256: sha256Schema.optional(),
  model_status: z.enum(MODEL_STATUSES).optional(),
});

export const modelUpdateSchema = z.strictObject({
  display_name: displayName.optional(),
  model_type: z.string().min(1, 'must not be empty').max(50, 'must be at most 50 characters').optional(),
  model_path: modelPathSchema.optional(),
  model_status: z.enum(MODEL_STATUSES).optional(),
});

export { NODE_VERSION_RE, PACKAGE_NAME_RE } from '../protocol/model-path.js';

export const nodeCreateSchema = z.strictObject({
  display_name: displayName,
  package_name: z.string().regex(PACKAGE_NAME_RE, PACKAGE_NAME_RULE),
  node_version: z.string().regex(NODE_VERSION_RE, NODE_VERSION_RULE),
  storage_key: storageKey,
  file_size: fileSize,
  sha256: sha256Schema.optional(),
});

export type { ModelRecord, NodeRecord } from './store.js';
export { rowToModel, rowToNode } from './store.js';

export const modelJson = (m: ModelRecord): Record<string, unknown> => ({
  id: m.id,
  display_name: m.displayName,
  model_type: m.modelType,
  model_path: m.modelPath,
  model_status: m.modelStatus,
  file_size: m.fileSize,
  sha256: m.sha256,
  created_at: new Date(m.createdAt).toISOString(),
  updated_at: new Date(m.updatedAt).toISOString(),
});

/** The spec's custom node list item (plus sha256 and updated_at). */
export const nodeJson = (n: NodeRecord): Record<string, unknown> => ({
  id: n.id,
  display_name: n.displayName,
  package_name: n.packageName,
  file_size: n.fileSize,
  node_version: n.nodeVersion,
  node_status: n.nodeStatus,
  sha256: n.sha256,
  created_at: new Date(n.createdAt).toISOString(),
  updated_at: new Date(n.updatedAt).toISOString(),
});

const STORAGE_KEY_USED = (): AppError => conflict('storage_key_used', 'storage_key: already used by another model or node (or it expired meanwhile)');

function isUniqueViolation(e: unknown): boolean {
  return (e as { code?: unknown } | null)?.code === '23505';
}

/** Streams the object once: its byte count and SHA-256 (hex). */
export async function measureObject(store: ObjectStore, key: string): Promise<{ size: number; sha256: string }> {
  const h = createHash('sha256');
  let size = 0;
  const body = await store.get(key);
  for await (const chunk of body as AsyncIterable<Buffer | string>) {
    const b = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    h.update(b);
    size += b.length;
  }
  return { size, sha256: h.digest('hex') };
}

export interface RegistryOptions {
  records: FilesStore;
  store: ObjectStore;
  staging: FileStaging;
  logger: Logger;
  /** Called after any change that can alter a team's sync manifest. */
  onChange?: (teamId: string) => void;
}

/** Checks and measures the uploaded object behind a staged storage_key. */
async function verifyUpload(o: RegistryOptions, caller: Caller, purpose: 'model' | 'node', key: string, fileSizeGiven: number, sha256Given: string | undefined): Promise<{ size: number; sha256: string }> {
  const staged = await o.staging.requireStaged(caller.teamId, key, purpose);
  if (staged.fileSize !== fileSizeGiven) throw invalidParameter(`file_size: must equal the file_size given at presign (${staged.fileSize})`);
  const head = await o.store.head(key);
  if (!head) throw invalidParameter('storage_key: nothing was uploaded at this key yet; PUT the file to the upload_url first (or complete its multipart upload)');
  if (head.size !== fileSizeGiven) throw invalidParameter(`file_size: the uploaded object is ${head.size} bytes, not ${fileSizeGiven}`);
  const m = await measureObject(o.store, key);
  if (m.size !== fileSizeGiven) throw invalidParameter(`file_size: the uploaded object is ${m.size} bytes, not ${fileSizeGiven}`);
  if (sha256Given !== undefined && sha256Given !== m.sha256) throw new AppError('bad_request', 'checksum_mismatch', `sha256: the uploaded object's SHA-256 is ${m.sha256}, not ${sha256Given}`);
  return m;
}

export class ModelRegistry {
  constructor(private readonly o: RegistryOptions) {}

  async create(caller: Caller, body: unknown, audit?: AuditNote): Promise<ModelRecord> {
    const b = parse(modelCreateSchema, body);
    if (await this.o.records.modelPathTaken(caller.teamId, b.model_path)) throw conflict('model_path_taken', `model_path: this team already has a model at ${JSON.stringify(b.model_path)}`);
    const m = await verifyUpload(this.o, caller, 'model', b.storage_key, b.file_size, b.sha256);
    let model: ModelRecord | null;
    try {
      model = await this.o.records.createModel({
        id: uuidv7(),
        teamId: caller.teamId,
        displayName: b.display_name,
        modelType: b.model_type,
        modelPath: b.model_path,
        modelStatus: b.model_status ?? 'active',
        storageKey: b.storage_key,
        fileSize: m.size,
        sha256: m.sha256,
        createdBy: caller.userId ?? null,
      }, audit);
    } catch (e) {
      if (isUniqueViolation(e)) throw conflict('model_path_taken', `model_path: this team already has a model at ${JSON.stringify(b.model_path)}`);
      throw e;
    }
    if (!model) throw STORAGE_KEY_USED();
    this.o.onChange?.(caller.teamId);
    return model;
  }

  async get(teamId: string, id: string): Promise<ModelRecord> {
    const m = await this.o.records.model(teamId, id);
    if (!m) throw notFound('model', 'model_not_found');
    return m;
  }

  list(teamId: string, f: { status?: string | undefined; modelType?: string | undefined }, limit: number, offset: number): Promise<{ rows: ModelRecord[]; total: number }> {
    return this.o.records.listModels(teamId, f, limit, offset);
  }

  /** PUT: only the provided fields change. */
  async update(teamId: string, id: string, body: unknown, audit?: AuditNote): Promise<ModelRecord> {
    const b = parse(modelUpdateSchema, body);
    if (Object.values(b).every((v) => v === undefined)) return this.get(teamId, id);
    let m: ModelRecord | null;
    try {
      m = await this.o.records.updateModel(teamId, id, b, audit);
    } catch (e) {
      if (isUniqueViolation(e)) throw conflict('model_path_taken', `model_path: this team already has a model at ${JSON.stringify(b.model_path)}`);
      throw e;
    }
    if (!m) throw notFound('model', 'model_not_found');
    this.o.onChange?.(teamId);
    return m;
  }

  async delete(teamId: string, id: string, audit?: AuditNote): Promise<void> {
    const key = await this.o.records.deleteModel(teamId, id, audit);
    if (key === null) throw notFound('model', 'model_not_found');
    this.o.onChange?.(teamId);
    await this.o.store.delete(key).catch((e: unknown) => this.o.logger.warn({ err: e, model_id: id }, 'model object delete failed'));
  }

  async active(teamId: string): Promise<ModelRecord[]> {
    return this.o.records.activeModels(teamId);
  }
}

export class NodeRegistry {
  constructor(private readonly o: RegistryOptions) {}

  async create(caller: Caller, body: unknown, audit?: AuditNote): Promise<NodeRecord> {
    const b = parse(nodeCreateSchema, body);
    const taken = (): AppError => conflict('package_name_taken', `package_name: this team already has ${b.package_name}; delete it first to install another version`);
    if (await this.o.records.packageTaken(caller.teamId, b.package_name)) throw taken();
    const m = await verifyUpload(this.o, caller, 'node', b.storage_key, b.file_size, b.sha256);
    let node: NodeRecord | null;
    try {
      node = await this.o.records.createNode({
        id: uuidv7(),
        teamId: caller.teamId,
        displayName: b.display_name,
        packageName: b.package_name,
        nodeVersion: b.node_version,
        storageKey: b.storage_key,
        fileSize: m.size,
        sha256: m.sha256,
        createdBy: caller.userId ?? null,
      }, audit);
    } catch (e) {
      if (isUniqueViolation(e)) throw taken();
      throw e;
    }
    if (!node) throw STORAGE_KEY_USED();
    this.o.onChange?.(caller.teamId);
    return node;
  }

  async get(teamId: string, id: string): Promise<NodeRecord> {
    const n = await this.o.records.node(teamId, id);
    if (!n) throw notFound('custom node', 'node_not_found');
    return n;
  }

  list(teamId: string, limit: number, offset: number): Promise<{ rows: NodeRecord[]; total: number }> {
    return this.o.records.listNodes(teamId, limit, offset);
  }

  async delete(teamId: string, id: string, audit?: AuditNote): Promise<void> {
    const key = await this.o.records.deleteNode(teamId, id, audit);
    if (key === null) throw notFound('custom node', 'node_not_found');
    this.o.onChange?.(teamId);
    await this.o.store.delete(key).catch((e: unknown) => this.o.logger.warn({ err: e, node_id: id }, 'node package delete failed'));
  }

  async active(teamId: string): Promise<NodeRecord[]> {
    return this.o.records.activeNodes(teamId);
  }
}
