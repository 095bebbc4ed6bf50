/**
 * The files module's SQL, in one store: staged_files, multipart_uploads, models, custom_nodes and
 * the output-retention columns of tasks. staging.ts, multipart.ts, outputs.ts and registry.ts call
 * this store and never run SQL themselves. Every query is scoped to the team it is given (a
 * foreign team's row is simply absent), except the sweeps, which work across teams by design.
 */
import { NON_TERMINAL } from '../domain/tasks/record.js';
import type { Database } from '../persistence/db.js';
import { inTx, q } from '../persistence/sql.js';
import type { PgBigint, PgTimestamp } from '../persistence/rows.js';
import { audited, recorderOn } from '../persistence/audit.js';
import type { AuditNote } from '../shared/audit.js';
import type { StagePurpose } from './keys.js';

export interface StagedRow {
  fileKey: string;
  teamId: string;
  purpose: StagePurpose;
  fileName: string;
  contentType: string;
  fileSize: number;
  expiresAt: number;
}

export interface MultipartRow {
  uploadId: string;
  teamId: string;
  storageKey: string;
  fileSize: number;
  partSize: number;
  partCount: number;
  expiresAt: number;
}

export interface ModelRecord {
  id: string;
  teamId: string;
  displayName: string;
  modelType: string;
  modelPath: string;
  modelStatus: 'active' | 'disabled';
  storageKey: string;
  fileSize: number;
  sha256: string;
  createdAt: number;
  updatedAt: number;
}

export interface NodeRecord {
  id: string;
  teamId: string;
  displayName: string;
  packageName: string;
  nodeVersion: string;
  nodeStatus: 'active' | 'disabled';
  storageKey: string;
  fileSize: number;
  sha256: string;
  createdAt: number;
  updatedAt: number;
}

/** A `staged_files` row (select *). */
interface StagedFileRow {
  file_key: string;
  team_id: string;
  purpose: StagePurpose;
  file_name: string;
  content_type: string;
  file_size: PgBigint;
  created_by_user_id: string | null;
  created_by_credential_id: string | null;
  created_at: PgTimestamp;
  expires_at: PgTimestamp;
}

/** A `multipart_uploads` row (select *). */
interface MultipartUploadRow {
  upload_id: string;
  team_id: string;
  storage_key: string;
  user_id: string | null;
  file_size: PgBigint;
  part_size: PgBigint;
  part_count: number;
  created_at: PgTimestamp;
  expires_at: PgTimestamp;
}

/** A `models` row (select * / returning *). */
interface ModelRow {
  id: string;
  team_id: string;
  display_name: string;
  model_type: string;
  model_path: string;
  model_status: ModelRecord['modelStatus'];
  storage_key: string;
  file_size: PgBigint;
  sha256: string;
  created_by: string | null;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
}

/** A `custom_nodes` row (select * / returning *). */
interface CustomNodeRow {
  id: string;
  team_id: string;
  display_name: string;
  package_name: string;
  node_version: string;
  node_status: NodeRecord['nodeStatus'];
  storage_key: string;
  file_size: PgBigint;
  sha256: string;
  created_by: string | null;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
}

/** The single row an INSERT ... RETURNING gives back. */
function inserted<T>(rows: T[]): T {
  const r = rows[0];
  if (r === undefined) throw new Error('insert returned no row');
  return r;
}

const stagedOf = (r: StagedFileRow): StagedRow => ({
  fileKey: r.file_key,
  teamId: r.team_id,
  purpose: r.purpose,
  fileName: r.file_name,
  contentType: r.content_type,
  fileSize: Number(r.file_size),
  expiresAt: new Date(r.expires_at).getTime(),
});

export const rowToModel = (r: ModelRow): ModelRecord => ({
  id: r.id,
  teamId: r.team_id,
  displayName: r.display_name,
  modelType: r.model_type,
  modelPath: r.model_path,
  modelStatus: r.model_status,
  storageKey: r.storage_key,
  fileSize: Number(r.file_size),
  sha256: r.sha256,
  createdAt: new Date(r.created_at).getTime(),
  updatedAt: new Date(r.updated_at).getTime(),
});

export const rowToNode = (r: CustomNodeRow): NodeRecord => ({
  id: r.id,
  teamId: r.team_id,
  displayName: r.display_name,
  packageName: r.package_name,
  nodeVersion: r.node_version,
  nodeStatus: r.node_status,
  storageKey: r.storage_key,
  fileSize: Number(r.file_size),
  sha256: r.sha256,
  createdAt: new Date(r.created_at).getTime(),
  updatedAt: new Date(r.updated_at).getTime(),
});

/** The columns a model update may change (undefined = unchanged). */
export interface ModelChanges {
  display_name?: string | undefined;
  model_type?: string | undefined;
  model_path?: string | undefined;
  model_status?: 'active' | 'disabled' | undefined;
}

export class FilesStore {
  constructor(private readonly db: Database) {}

  private get q() {
    return q(this.db);
  }

  // -------------------------------------------------------------------------------------------
  // staged_files

  async insertStaged(r: StagedRow & { userId: string | null; credentialId: string | null }): Promise<void> {
    await this.q(
      `insert into staged_files (file_key, team_id, purpose, file_name, content_type, file_size, created_by_user_id, created_by_credential_id, expires_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [r.fileKey, r.teamId, r.purpose, r.fileName, r.contentType, r.fileSize, r.userId, r.credentialId, new Date(r.expiresAt)],
    );
  }

  /** This team's staged input rows among keys (expired rows included). */
  async stagedInputs(teamId: string, keys: readonly string[]): Promise<StagedRow[]> {
    const rows = await this.q<StagedFileRow>(`select * from staged_files where team_id = ? and purpose = 'input' and file_key in (select jsonb_array_elements_text(?::jsonb))`, [teamId, JSON.stringify(keys)]);
    return rows.map(stagedOf);
  }

  async staged(teamId: string, key: string): Promise<StagedRow | null> {
    const rows = await this.q<StagedFileRow>('select * from staged_files where file_key = ? and team_id = ?', [key, teamId]);
    return rows[0] ? stagedOf(rows[0]) : null;
  }

  /**
   * Deletes up to limit staged rows expired at `now`, keeping input keys a non-terminal task of
   * the team still references; returns the deleted keys.
   */
  async sweepStaged(now: number, limit: number): Promise<string[]> {
    const rows = await this.q<{ file_key: string }>(
      `delete from staged_files s where s.file_key in (
         select f.file_key from staged_files f
         where f.expires_at <= ?
           and not (f.purpose = 'input' and exists (
             select 1 from tasks t where t.team_id = f.team_id
               and t.task_status = any(?::text[])
               and t.input_files @> jsonb_build_array(jsonb_build_object('fileKey', f.file_key))))
         order by f.expires_at limit ?)
       returning s.file_key`,
      [new Date(now), `{${NON_TERMINAL.join(',')}}`, limit],
    );
    return rows.map((r) => r.file_key);
  }

  // -------------------------------------------------------------------------------------------
  // multipart_uploads

  async insertMultipart(r: MultipartRow & { userId: string | null }): Promise<void> {
    await this.q(`insert into multipart_uploads (upload_id, team_id, storage_key, user_id, file_size, part_size, part_count, expires_at) values (?, ?, ?, ?, ?, ?, ?, ?)`, [
      r.uploadId,
      r.teamId,
      r.storageKey,
      r.userId,
      r.fileSize,
      r.partSize,
      r.partCount,
      new Date(r.expiresAt),
    ]);
  }

  async multipart(teamId: string, uploadId: string, storageKey: string): Promise<MultipartRow | null> {
    const rows = await this.q<MultipartUploadRow>('select * from multipart_uploads where upload_id = ? and team_id = ? and storage_key = ?', [uploadId, teamId, storageKey]);
    const r = rows[0];
    if (!r) return null;
    return {
      uploadId: r.upload_id,
      teamId: r.team_id,
      storageKey: r.storage_key,
      fileSize: Number(r.file_size),
      partSize: Number(r.part_size),
      partCount: Number(r.part_count),
      expiresAt: new Date(r.expires_at).getTime(),
    };
  }

  async deleteMultipart(uploadId: string): Promise<void> {
    await this.q('delete from multipart_uploads where upload_id = ?', [uploadId]);
  }

  /** Deletes the uploads open on a storage key; returns their upload ids. */
  async deleteMultipartsOfKey(storageKey: string): Promise<string[]> {
    const rows = await this.q<{ upload_id: string }>('delete from multipart_uploads where storage_key = ? returning upload_id', [storageKey]);
    return rows.map((r) => r.upload_id);
  }

  /** Deletes up to limit uploads expired at `now` (oldest first); returns them. */
  async sweepMultipart(now: number, limit: number): Promise<Array<{ uploadId: string; storageKey: string }>> {
    const rows = await this.q<{ upload_id: string; storage_key: string }>('delete from multipart_uploads where upload_id in (select upload_id from multipart_uploads where expires_at <= ? order by expires_at limit ?) returning upload_id, storage_key', [
      new Date(now),
      limit,
    ]);
    return rows.map((r) => ({ uploadId: r.upload_id, storageKey: r.storage_key }));
  }

  // -------------------------------------------------------------------------------------------
  // tasks (output retention)

  async taskOutputInfo(teamId: string, taskId: string): Promise<{ dispatchTarget: string; finishedAt: number | null } | null> {
    const rows = await this.q<{ dispatch_target: string; finished_at: PgTimestamp | null }>('select dispatch_target, finished_at from tasks where id = ? and team_id = ?', [taskId, teamId]);
    const r = rows[0];
    if (!r) return null;
    return { dispatchTarget: r.dispatch_target, finishedAt: r.finished_at ? new Date(r.finished_at).getTime() : null };
  }

  /** Finished tasks whose outputs are not yet marked expired, finished at or before cutoff (oldest first). */
  async tasksPastRetention(cutoff: number, limit: number): Promise<Array<{ id: string; teamId: string; finishedAt: number }>> {
    const rows = await this.q<{ id: string; team_id: string; finished_at: PgTimestamp }>('select id, team_id, finished_at from tasks where output_expires_at is null and finished_at is not null and finished_at <= ? order by finished_at limit ?', [
      new Date(cutoff),
      limit,
    ]);
    return rows.map((r) => ({ id: r.id, teamId: r.team_id, finishedAt: new Date(r.finished_at).getTime() }));
  }

  async markOutputsExpired(taskId: string, expiredAt: number): Promise<void> {
    await this.q('update tasks set output_expires_at = ? where id = ? and output_expires_at is null', [new Date(expiredAt), taskId]);
  }

  // -------------------------------------------------------------------------------------------
  // models

  async modelPathTaken(teamId: string, modelPath: string): Promise<boolean> {
    return (await this.q('select 1 from models where team_id = ? and model_path = ?', [teamId, modelPath])).length > 0;
  }

  /**
   * Consumes the staged row of storageKey and inserts the model, in one transaction. Null when the
   * staged row is gone (another model or node took it, or it was swept). A unique violation
   * (model_path of the team) is thrown as the driver's error (code 23505).
   */
  async createModel(m: Omit<ModelRecord, 'createdAt' | 'updatedAt'> & { createdBy: string | null }, audit?: AuditNote): Promise<ModelRecord | null> {
    return inTx(this.db, async (tq) => {
      const consumed = await tq('delete from staged_files where file_key = ? and team_id = ? returning file_key', [m.storageKey, m.teamId]);
      if (consumed.length === 0) return null;
      const rows = await tq<ModelRow>(
        `insert into models (id, team_id, display_name, model_type, model_path, model_status, storage_key, file_size, sha256, created_by)
         values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) returning *`,
        [m.id, m.teamId, m.displayName, m.modelType, m.modelPath, m.modelStatus, m.storageKey, m.fileSize, m.sha256, m.createdBy],
      );
      await recorderOn(tq, audit)({ targetId: m.id, details: { model_path: m.modelPath } });
      return rowToModel(inserted(rows));
    });
  }

  async model(teamId: string, id: string): Promise<ModelRecord | null> {
    const rows = await this.q<ModelRow>('select * from models where team_id = ? and id = ?', [teamId, id]);
    return rows[0] ? rowToModel(rows[0]) : null;
  }

  async listModels(teamId: string, f: { status?: string | undefined; modelType?: string | undefined }, limit: number, offset: number): Promise<{ rows: ModelRecord[]; total: number }> {
    const where = ['team_id = ?'];
    const params: unknown[] = [teamId];
    if (f.status) {
      where.push('model_status = ?');
      params.push(f.status);
    }
    if (f.modelType) {
      where.push('model_type = ?');
      params.push(f.modelType);
    }
    const qq = this.q;
    const rows = await qq<ModelRow>(`select * from models where ${where.join(' and ')} order by created_at desc, id desc limit ? offset ?`, [...params, limit, offset]);
    const c = await qq<{ n: number }>(`select count(*)::int as n from models where ${where.join(' and ')}`, params);
    return { rows: rows.map(rowToModel), total: Number(c[0]?.n ?? 0) };
  }

  /** Applies the given changes (at least one); null when the model does not exist in this team. */
  async updateModel(teamId: string, id: string, changes: ModelChanges, audit?: AuditNote): Promise<ModelRecord | null> {
    const sets: string[] = [];
    const params: unknown[] = [];
    const col: ModelChanges = { display_name: changes.display_name, model_type: changes.model_type, model_path: changes.model_path, model_status: changes.model_status };
    for (const [k, v] of Object.entries(col)) {
      if (v === undefined) continue;
      sets.push(`${k} = ?`);
      params.push(v);
    }
    if (sets.length === 0) return this.model(teamId, id);
    return audited(this.db, audit, async (tq, record) => {
      const rows = await tq<ModelRow>(`update models set ${sets.join(', ')}, updated_at = now() where team_id = ? and id = ? returning *`, [...params, teamId, id]);
      if (!rows[0]) return null;
      await record({ details: { changed: Object.keys(col).filter((k) => (col as Record<string, unknown>)[k] !== undefined) } });
      return rowToModel(rows[0]);
    });
  }

  /** Deletes the model; its storage key, or null when it does not exist in this team. */
  async deleteModel(teamId: string, id: string, audit?: AuditNote): Promise<string | null> {
    return audited(this.db, audit, async (tq, record) => {
      const rows = await tq<{ storage_key: string }>('delete from models where team_id = ? and id = ? returning storage_key', [teamId, id]);
      if (!rows[0]) return null;
      await record();
      return rows[0].storage_key;
    });
  }

  async activeModels(teamId: string): Promise<ModelRecord[]> {
    const rows = await this.q<ModelRow>(`select * from models where team_id = ? and model_status = 'active' order by model_path`, [teamId]);
    return rows.map(rowToModel);
  }

  // -------------------------------------------------------------------------------------------
  // custom_nodes

  async packageTaken(teamId: string, packageName: string): Promise<boolean> {
    return (await this.q('select 1 from custom_nodes where team_id = ? and package_name = ?', [teamId, packageName])).length > 0;
  }

  /** Like createModel: consumes the staged row and inserts the node (active) in one transaction; null when the staged row is gone. */
  async createNode(n: Omit<NodeRecord, 'createdAt' | 'updatedAt' | 'nodeStatus'> & { createdBy: string | null }, audit?: AuditNote): Promise<NodeRecord | null> {
    return inTx(this.db, async (tq) => {
      const consumed = await tq('delete from staged_files where file_key = ? and team_id = ? returning file_key', [n.storageKey, n.teamId]);
      if (consumed.length === 0) return null;
      const rows = await tq<CustomNodeRow>(
        `insert into custom_nodes (id, team_id, display_name, package_name, node_version, node_status, storage_key, file_size, sha256, created_by)
         values (?, ?, ?, ?, ?, 'active', ?, ?, ?, ?) returning *`,
        [n.id, n.teamId, n.displayName, n.packageName, n.nodeVersion, n.storageKey, n.fileSize, n.sha256, n.createdBy],
      );
      await recorderOn(tq, audit)({ targetId: n.id, details: { package_name: n.packageName } });
      return rowToNode(inserted(rows));
    });
  }

  async node(teamId: string, id: string): Promise<NodeRecord | null> {
    const rows = await this.q<CustomNodeRow>('select * from custom_nodes where team_id = ? and id = ?', [teamId, id]);
    return rows[0] ? rowToNode(rows[0]) : null;
  }

  async listNodes(teamId: string, limit: number, offset: number): Promise<{ rows: NodeRecord[]; total: number }> {
    const qq = this.q;
    const rows = await qq<CustomNodeRow>('select * from custom_nodes where team_id = ? order by created_at desc, id desc limit ? offset ?', [teamId, limit, offset]);
    const c = await qq<{ n: number }>('select count(*)::int as n from custom_nodes where team_id = ?', [teamId]);
    return { rows: rows.map(rowToNode), total: Number(c[0]?.n ?? 0) };
  }

  async deleteNode(teamId: string, id: string, audit?: AuditNote): Promise<string | null> {
    return audited(this.db, audit, async (tq, record) => {
      const rows = await tq<{ storage_key: string }>('delete from custom_nodes where team_id = ? and id = ? returning storage_key', [teamId, id]);
      if (!rows[0]) return null;
      await record();
      return rows[0].storage_key;
    });
  }

  async activeNodes(teamId: string): Promise<NodeRecord[]> {
    const rows = await this.q<CustomNodeRow>(`select * from custom_nodes where team_id = ? and node_status = 'active' order by package_name`, [teamId]);
    return rows.map(rowToNode);
  }
}
