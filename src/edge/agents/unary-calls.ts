/**
 * The agent server's unary calls (PresignOutputs, PresignInputs, PresignCheckpoint,
 * CommitCheckpoint, GetSyncManifest), the same for both transports: the ak- is verified on every
 * call, the request is decoded by its schema (wire-schema.ts), and a task's URLs are handed out
 * only to the session whose agent holds it at that attempt and epoch.
 */
import type { TaskRecord } from '../../actors/ports.js';
import type { ObjectStore } from '../../storage/port.js';
import { AppError, invalidParameter, unavailable } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { toGrpcError } from '../error-map.js';
import { checkpointKey, outputKey, teamOutputsPrefix } from '../../files/keys.js';
import { CommitCheckpointRequest, PresignCheckpointRequest, PresignInputsRequest, PresignOutputsRequest, decodeRequest } from './wire-schema.js';
import type { PresignOutputsRequest__Output } from '../../gen/gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignOutputsResponse } from '../../gen/gantry/agent/v1/PresignOutputsResponse.js';
import type { PresignInputsRequest__Output } from '../../gen/gantry/agent/v1/PresignInputsRequest.js';
import type { PresignInputsResponse } from '../../gen/gantry/agent/v1/PresignInputsResponse.js';
import type { SyncManifest as SyncManifestMsg } from '../../gen/gantry/agent/v1/SyncManifest.js';
import type { PresignCheckpointRequest__Output } from '../../gen/gantry/agent/v1/PresignCheckpointRequest.js';
import type { PresignCheckpointResponse } from '../../gen/gantry/agent/v1/PresignCheckpointResponse.js';
import type { CommitCheckpointRequest__Output } from '../../gen/gantry/agent/v1/CommitCheckpointRequest.js';
import type { CommitCheckpointResponse } from '../../gen/gantry/agent/v1/CommitCheckpointResponse.js';
import type { AgentGrpcServerOptions, AgentIdent, Conn, UnaryOutcome } from './conn.js';

export class AgentUnaryCalls {
  constructor(
    private readonly o: AgentGrpcServerOptions,
    private readonly log: Logger,
    /** The live stream of a session on this node. */
    private readonly liveSession: (sessionId: string) => Conn | undefined,
  ) {}

  /** A unary call with its ak- verified first (both transports: the WebSocket one checks the socket's ak- on every call). */
  async run<T>(token: string | null, fn: (ident: AgentIdent) => Promise<T>): Promise<UnaryOutcome<T>> {
    try {
      if (!token) throw new AppError('unauthorized', 'credential_missing', 'authorization: Bearer ak-... is required');
      return { ok: true, value: await fn(await this.o.verifyCredential(token)) };
    } catch (e) {
      const g = toGrpcError(e);
      if (g.unexpected) this.log.error({ err: e }, 'agent unary call failed');
      return { ok: false, code: g.code, details: g.details };
    }
  }

  /** PresignOutputs on another transport (the WebSocket's request frames). */
  callPresignOutputs(token: string | null, req: PresignOutputsRequest__Output): Promise<UnaryOutcome<PresignOutputsResponse>> {
    return this.run(token, (ident) => this.presignOutputs(ident, req));
  }

  /** PresignInputs on another transport. */
  callPresignInputs(token: string | null, req: PresignInputsRequest__Output): Promise<UnaryOutcome<PresignInputsResponse>> {
    return this.run(token, (ident) => this.presignInputs(ident, req));
  }

  /** PresignCheckpoint on another transport. */
  callPresignCheckpoint(token: string | null, req: PresignCheckpointRequest__Output): Promise<UnaryOutcome<PresignCheckpointResponse>> {
    return this.run(token, (ident) => this.presignCheckpoint(ident, req));
  }

  /** CommitCheckpoint on another transport. */
  callCommitCheckpoint(token: string | null, req: CommitCheckpointRequest__Output): Promise<UnaryOutcome<CommitCheckpointResponse>> {
    return this.run(token, (ident) => this.commitCheckpoint(ident, req));
  }

  /** GetSyncManifest on another transport. */
  callGetSyncManifest(token: string | null): Promise<UnaryOutcome<SyncManifestMsg>> {
    return this.run(token, (ident) => this.getSyncManifest(ident));
  }

  /** The task, if this session's agent holds it at this attempt and epoch. */
  private async heldTask(ident: { teamId: string }, req: { session_id: string; task_id: string; attempt: number; epoch: number }): Promise<{ conn: Conn; task: TaskRecord }> {
    const conn = this.liveSession(req.session_id);
    if (!conn || conn.closed || conn.teamId !== ident.teamId || !conn.agentId) throw unavailable('session_not_connected', 'no live agent stream with this session_id on this node; reconnect and retry');
    const task = await this.o.tasks.load(req.task_id);
    const ok =
      task !== null &&
      task.teamId === ident.teamId &&
      task.agentId === conn.agentId &&
      task.attempt === req.attempt &&
      task.leaseEpoch === req.epoch &&
      (task.status === 'queued' || task.status === 'provisioning' || task.status === 'running');
    if (!ok || !task) throw new AppError('precondition_failed', 'task_not_held', 'this agent does not hold that task at this attempt and epoch');
    return { conn, task };
  }

  private store(): ObjectStore {
    if (!this.o.objectStore) throw unavailable('object_store_unavailable', 'the object store is not configured on this node');
    return this.o.objectStore;
  }

  private async presignOutputs(ident: { credentialId: string; teamId: string }, raw: PresignOutputsRequest__Output): Promise<PresignOutputsResponse> {
    const store = this.store();
    const req = decodeRequest(PresignOutputsRequest, raw);
    const { task } = await this.heldTask(ident, req);
    const uploads = [];
    for (const f of req.files) {
      const key = outputKey(task.teamId, task.id, task.attempt, f.name);
      const p = await store.presignPut(key, { contentLength: f.size, contentType: f.content_type, expiresInS: this.o.presignExpiresS ?? 3600 });
      uploads.push({ name: f.name, storage_key: key, upload_url: p.url, upload_headers: p.headers, expires_at_ms: p.expiresAt });
    }
    return { uploads };
  }

  private async presignCheckpoint(ident: { credentialId: string; teamId: string }, raw: PresignCheckpointRequest__Output): Promise<PresignCheckpointResponse> {
    if (!this.o.checkpoints) throw new AppError('precondition_failed', 'checkpoints_unavailable', 'checkpoints are not kept on this node');
    const store = this.store();
    const req = decodeRequest(PresignCheckpointRequest, raw);
    const { task } = await this.heldTask(ident, req);
    const expiresInS = this.o.presignExpiresS ?? 3600;
    const out: PresignCheckpointResponse = { storage_key: '', upload_url: '', upload_headers: {}, download_url: '', step: 0 };
    if (req.size > 0) {
      const key = checkpointKey(task.teamId, task.id, task.attempt, req.step);
      const p = await store.presignPut(key, { contentLength: req.size, contentType: 'application/x-tar', expiresInS });
      Object.assign(out, { storage_key: key, upload_url: p.url, upload_headers: p.headers });
    }
    const have = await this.o.checkpoints.checkpoint(task.id);
    // only a key of this team's outputs is ever signed (it was checked when committed)
    if (have && have.key.startsWith(teamOutputsPrefix(task.teamId))) Object.assign(out, { download_url: await store.presignGet(have.key, { expiresInS }), step: have.step });
    return out;
  }

  private async commitCheckpoint(ident: { credentialId: string; teamId: string }, raw: CommitCheckpointRequest__Output): Promise<CommitCheckpointResponse> {
    if (!this.o.checkpoints) throw new AppError('precondition_failed', 'checkpoints_unavailable', 'checkpoints are not kept on this node');
    const store = this.store();
    const req = decodeRequest(CommitCheckpointRequest, raw);
    const { task } = await this.heldTask(ident, req);
    const key = checkpointKey(task.teamId, task.id, task.attempt, req.step);
    if (req.storage_key !== key) throw invalidParameter(`storage_key: must be the key PresignCheckpoint gave (${key})`);
    if (!(await store.head(key))) throw new AppError('precondition_failed', 'checkpoint_not_uploaded', 'the checkpoint was not uploaded to its storage_key');
    const r = await this.o.checkpoints.setCheckpoint(task.id, task.leaseEpoch, key, req.step);
    if (!r) throw new AppError('precondition_failed', 'task_not_held', 'this agent does not hold that task at this attempt and epoch');
    // bounded: the checkpoint it replaces (an earlier attempt's) is deleted
    if (r.previous && r.previous !== key && r.previous.startsWith(teamOutputsPrefix(task.teamId))) {
      await store.delete(r.previous).catch((e: unknown) => this.log.warn({ err: e, task_id: task.id }, 'could not delete the replaced checkpoint'));
    }
    return {};
  }

  private async getSyncManifest(ident: { credentialId: string; teamId: string }): Promise<SyncManifestMsg> {
    if (!this.o.syncManifest) throw unavailable('sync_unavailable', 'model sync is not configured on this node');
    const m = await this.o.syncManifest(ident.teamId);
    const expires = Date.parse(m.expires_at);
    return {
      models: m.models.map((x) => ({ id: x.id, model_path: x.model_path, model_type: x.model_type, size: x.size, sha256: x.sha256, download_url: x.download_url })),
      custom_nodes: m.custom_nodes.map((x) => ({
        id: x.id,
        package_name: x.package_name,
        node_version: x.node_version,
        inventory_name: x.inventory_name,
        size: x.size,
        sha256: x.sha256,
        download_url: x.download_url,
      })),
      expires_at_ms: Number.isFinite(expires) ? expires : 0,
    };
  }

  private async presignInputs(ident: { credentialId: string; teamId: string }, raw: PresignInputsRequest__Output): Promise<PresignInputsResponse> {
    const { task } = await this.heldTask(ident, decodeRequest(PresignInputsRequest, raw));
    const a = await this.o.tasks.assignment(task.id);
    const inputs = a?.inputFiles ?? [];
    if (inputs.length === 0) return { files: [] };
    const store = this.store();
    const keyOf = this.o.inputObjectKey ?? ((_team: string, fileKey: string) => fileKey);
    const files = [];
    for (const f of inputs) {
      const url = await store.presignGet(keyOf(task.teamId, f.fileKey), { expiresInS: this.o.presignExpiresS ?? 3600 });
      files.push({ key: f.key, file_key: f.fileKey, file_name: f.fileName, download_url: url });
    }
    return { files };
  }
}
