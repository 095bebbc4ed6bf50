/**
 * The team model registry (/models) and custom node registry (/nodes): one implementation
 * (Registry) parameterized by kind (MODELS, NODES); models add filters to list and an update.
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

/** The upload every registry entry is created from (its create body's common fields). */
interface UploadFields {
  storage_key: string;
  file_size: number;
  sha256?: string | undefined;
}

/** The measured upload and creator of a new entry: the fields every record shares. */
interface NewEntry {
  id: string;
  teamId: string;
  storageKey: string;
  fileSize: number;
  sha256: string;
  createdBy: string | null;
}

/** What one registry (models, custom nodes) is made of: its create body, its unique name, its rows. */
interface RegistryKind<R, B extends UploadFields> {
  /** The staged upload's purpose (POST /models/presign, /nodes/presign). */
  purpose: 'model' | 'node';
  createSchema: z.ZodType<B>;
  /** notFound's noun and error code. */
  notFound: () => AppError;
  /** The 409 of a create whose unique name (model_path, package_name) the team already has. */
  taken: (b: B) => AppError;
  isTaken: (records: FilesStore, teamId: string, b: B) => Promise<boolean>;
  /** Consumes the staged row and inserts the entry (FilesStore.createModel / createNode). */
  insert: (records: FilesStore, b: B, e: NewEntry, audit?: AuditNote) => Promise<R | null>;
  find: (records: FilesStore, teamId: string, id: string) => Promise<R | null>;
  /** Deletes the entry; its storage key, or null when the team has no such entry. */
  remove: (records: FilesStore, teamId: string, id: string, audit?: AuditNote) => Promise<string | null>;
  active: (records: FilesStore, teamId: string) => Promise<R[]>;
  /** The warning when the object of a deleted entry cannot be removed: its id field and message. */
  deleteFailed: { idField: string; message: string };
}

/** The create, get, delete and active flows both registries share, parameterized by kind. */
class Registry<R, B extends UploadFields> {
  constructor(
    protected readonly o: RegistryOptions,
    private readonly kind: RegistryKind<R, B>,
  ) {}

  async create(caller: Caller, body: unknown, audit?: AuditNote): Promise<R> {
    const k = this.kind;
    const b = parse(k.createSchema, body);
    if (await k.isTaken(this.o.records, caller.teamId, b)) throw k.taken(b);
    const m = await verifyUpload(this.o, caller, k.purpose, b.storage_key, b.file_size, b.sha256);
    let entry: R | null;
    try {
      entry = await k.insert(this.o.records, b, { id: uuidv7(), teamId: caller.teamId, storageKey: b.storage_key, fileSize: m.size, sha256: m.sha256, createdBy: caller.userId ?? null }, audit);
    } catch (e) {
      if (isUniqueViolation(e)) throw k.taken(b);
      throw e;
    }
    if (!entry) throw STORAGE_KEY_USED();
    this.o.onChange?.(caller.teamId);
    return entry;
  }

  async get(teamId: string, id: string): Promise<R> {
    const entry = await this.kind.find(this.o.records, teamId, id);
    if (!entry) throw this.kind.notFound();
    return entry;
  }

  async delete(teamId: string, id: string, audit?: AuditNote): Promise<void> {
    const key = await this.kind.remove(this.o.records, teamId, id, audit);
    if (key === null) throw this.kind.notFound();
    this.o.onChange?.(teamId);
    const { idField, message } = this.kind.deleteFailed;
    await this.o.store.delete(key).catch((e: unknown) => this.o.logger.warn({ err: e, [idField]: id }, message));
  }

  async active(teamId: string): Promise<R[]> {
    return this.kind.active(this.o.records, teamId);
  }
}

const modelPathTaken = (modelPath: string | undefined): AppError => conflict('model_path_taken', `model_path: this team already has a model at ${JSON.stringify(modelPath)}`);
const modelNotFound = (): AppError => notFound('model', 'model_not_found');

const MODELS: RegistryKind<ModelRecord, z.infer<typeof modelCreateSchema>> = {
  purpose: 'model',
  createSchema: modelCreateSchema,
  notFound: modelNotFound,
  taken: (b) => modelPathTaken(b.model_path),
  isTaken: (records, teamId, b) => records.modelPathTaken(teamId, b.model_path),
  insert: (records, b, e, audit) =>
    records.createModel({ ...e, displayName: b.display_name, modelType: b.model_type, modelPath: b.model_path, modelStatus: b.model_status ?? 'active' }, audit),
  find: (records, teamId, id) => records.model(teamId, id),
  remove: (records, teamId, id, audit) => records.deleteModel(teamId, id, audit),
  active: (records, teamId) => records.activeModels(teamId),
  deleteFailed: { idField: 'model_id', message: 'model object delete failed' },
};

const NODES: RegistryKind<NodeRecord, z.infer<typeof nodeCreateSchema>> = {
  purpose: 'node',
  createSchema: nodeCreateSchema,
  notFound: () => notFound('custom node', 'node_not_found'),
  taken: (b) => conflict('package_name_taken', `package_name: this team already has ${b.package_name}; delete it first to install another version`),
  isTaken: (records, teamId, b) => records.packageTaken(teamId, b.package_name),
  insert: (records, b, e, audit) => records.createNode({ ...e, displayName: b.display_name, packageName: b.package_name, nodeVersion: b.node_version }, audit),
  find: (records, teamId, id) => records.node(teamId, id),
  remove: (records, teamId, id, audit) => records.deleteNode(teamId, id, audit),
  active: (records, teamId) => records.activeNodes(teamId),
  deleteFailed: { idField: 'node_id', message: 'node package delete failed' },
};

export class ModelRegistry extends Registry<ModelRecord, z.infer<typeof modelCreateSchema>> {
  constructor(o: RegistryOptions) {
    super(o, MODELS);
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
      if (isUniqueViolation(e)) throw modelPathTaken(b.model_path);
      throw e;
    }
    if (!m) throw modelNotFound();
    this.o.onChange?.(teamId);
    return m;
  }
}

export class NodeRegistry extends Registry<NodeRecord, z.infer<typeof nodeCreateSchema>> {
  constructor(o: RegistryOptions) {
    super(o, NODES);
  }

  list(teamId: string, limit: number, offset: number): Promise<{ rows: NodeRecord[]; total: number }> {
    return this.o.records.listNodes(teamId, limit, offset);
  }
}
