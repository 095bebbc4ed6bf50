/**
 * The workflow catalog in PostgreSQL: the `workflows` table holds the current definition of each
 * workflow, `workflow_snapshots` one immutable row per version (version 1 included), written in the
 * same transaction as the change that made it. Every method takes the caller's team id and scopes
 * every query by it: a foreign team's workflow is indistinguishable from a missing one (null / 404).
 *
 * Decisions (docs/api.md):
 * - workflow_slug is unique across all teams (unique index workflows_slug_uq); a violation on create,
 *   import or a slug-changing update is 409 `slug_taken`.
 * - Every successful update (including a status-only one) bumps `version` by one and writes the
 *   snapshot of the new version with its snapshot_note. Concurrent updates are fenced by a
 *   conditional `update ... where version = <read version>`: the loser gets 409
 *   `workflow_version_conflict` and nothing of its change is kept.
 * - Delete is a hard delete of the workflow and its snapshots (cascade) and frees the slug. Tasks
 *   are not touched: each keeps its own resolved copy of the graph/spec (tasks.resolved_workflow),
 *   its workflow_id/slug/version, so queued and running tasks finish unchanged. Use
 *   workflow_status `archived` to stop new runs while keeping the history.
 * - resolveForRun throws (404 workflow_not_found / workflow_version_not_found, 409 workflow_archived)
 *   instead of returning a status the caller would have to check.
 */
import type { Database } from './db.js';
import { WORKFLOW_NOT_FOUND, WORKFLOW_VERSION_NOT_FOUND, type RunnableWorkflow, type SnapshotRecord, type WorkflowListFilter, type WorkflowRecord, type WorkflowRef } from '../domain/workflows/records.js';
import { inTx, q, json, iso, type Q } from './sql.js';
import { jsonObject, type PgTimestamp } from './rows.js';
import { WorkflowCache } from './workflow-cache.js';
import { audited, recorderOn } from './audit.js';
import type { AuditNote } from '../shared/audit.js';
import { uuidv7 } from '../shared/ids.js';
import { conflict, notFound, type AppError } from '../shared/errors.js';
import type { PageRequest } from '../shared/pagination.js';
import {
  mergeWorkflowUpdate,
  parameterDefSchema,
  workflowCreateSchema,
  type NormalizedParameterDef,
  type ToolType,
  type WorkflowDefinition,
  type WorkflowStatus,
  type WorkflowUpdate,
} from '../domain/workflows/schema.js';

export { parseSlugRef, WORKFLOW_NOT_FOUND, WORKFLOW_VERSION_NOT_FOUND } from '../domain/workflows/records.js';
export type { RunnableWorkflow, SnapshotRecord, WorkflowListFilter, WorkflowRecord, WorkflowRef } from '../domain/workflows/records.js';

const workflowNotFound = (): AppError => notFound('workflow', WORKFLOW_NOT_FOUND);
const slugTaken = (slug: string): AppError => conflict('slug_taken', `workflow_slug ${JSON.stringify(slug)} is already taken`);

/** A `workflows` row (select *). */
interface WorkflowRow {
  id: string;
  team_id: string;
  workflow_slug: string;
  display_name: string;
  description: string | null;
  tool_type: ToolType;
  workflow_json: unknown;
  parameters: unknown;
  required_labels: unknown;
  task_timeout: number;
  max_retries: number;
  preferred_gpu: string | null;
  default_dispatch_target: string;
  min_vram_gb: number;
  required_models: unknown;
  default_priority: number | null;
  version: number;
  workflow_status: WorkflowStatus;
  created_by: string | null;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
}

/** A `workflow_snapshots` row (select *, or the listing's columns). */
interface SnapshotRow {
  id: string;
  workflow_id: string;
  team_id: string;
  workflow_version: number;
  definition: unknown;
  snapshot_note: string | null;
  created_at: PgTimestamp;
}

/** resolveForRun's row: the workflow, its current version and the pinned snapshot (null columns when that version does not exist). */
interface RunRow extends WorkflowRow {
  current_version: number;
  snapshot_id: string | null;
  snapshot_version: number | null;
  snapshot_definition: unknown;
  snapshot_created_at: PgTimestamp | null;
}

const DEFINITION_KEYS = Object.keys(workflowCreateSchema.shape) as Array<keyof WorkflowDefinition>;
const PARAM_KEYS = Object.keys(parameterDefSchema.shape) as string[];

/** Parameters come back from jsonb with keys re-ordered; rebuild them in schema key order. */
function orderParameter(p: Record<string, unknown>): NormalizedParameterDef {
  const out: Record<string, unknown> = {};
  // `default: null` is a legitimate json default, so presence (not null-ness) decides.
  for (const k of PARAM_KEYS) if (Object.hasOwn(p, k) && p[k] !== undefined) out[k] = p[k];
  return out as NormalizedParameterDef;
}

/** A definition in create-schema key order, optional fields left out when unset. */
export function normalizeDefinition(src: Record<string, unknown>): WorkflowDefinition {
  const out: Record<string, unknown> = {};
  for (const k of DEFINITION_KEYS) {
    const v = src[k];
    if (v === undefined || v === null) continue;
    out[k] = k === 'parameters' ? (v as Array<Record<string, unknown>>).map(orderParameter) : v;
  }
  return out as WorkflowDefinition;
}

function rowDefinition(r: WorkflowRow): WorkflowDefinition {
  return normalizeDefinition({
    workflow_slug: r.workflow_slug,
    display_name: r.display_name,
    workflow_json: r.workflow_json,
    description: r.description,
    parameters: r.parameters ?? [],
    tool_type: r.tool_type,
    required_labels: r.required_labels ?? [],
    task_timeout: Number(r.task_timeout),
    max_retries: Number(r.max_retries),
    preferred_gpu: r.preferred_gpu,
    default_dispatch_target: r.default_dispatch_target,
    min_vram_gb: Number(r.min_vram_gb),
    required_models: r.required_models ?? [],
    default_priority: r.default_priority === null || r.default_priority === undefined ? null : Number(r.default_priority),
  });
}

function rowToRecord(r: WorkflowRow): WorkflowRecord {
  return {
    id: r.id,
    teamId: r.team_id,
    definition: rowDefinition(r),
    version: Number(r.version),
    status: r.workflow_status,
    createdAt: iso(r.created_at) ?? '',
    updatedAt: iso(r.updated_at) ?? '',
  };
}

const rowToSnapshot = (r: Pick<SnapshotRow, 'id' | 'workflow_id' | 'workflow_version' | 'snapshot_note' | 'created_at'>): SnapshotRecord => ({
  id: r.id,
  workflowId: r.workflow_id,
  version: Number(r.workflow_version),
  createdAt: iso(r.created_at) ?? '',
  note: r.snapshot_note ?? '',
});

function isUniqueViolation(e: unknown, constraint?: string): boolean {
  const err = e as { code?: unknown; constraint?: unknown; message?: unknown } | null;
  if (err?.code !== '23505') return false;
  if (constraint === undefined) return true;
  return err.constraint === constraint || (typeof err.message === 'string' && err.message.includes(constraint));
}

/** The column values of a definition, in the order of DEF_COLUMNS. */
const DEF_COLUMNS = [
  'workflow_slug',
  'display_name',
  'description',
  'tool_type',
  'workflow_json',
  'parameters',
  'required_labels',
  'task_timeout',
  'max_retries',
  'preferred_gpu',
  'default_dispatch_target',
  'min_vram_gb',
  'required_models',
  'default_priority',
] as const;
const JSONB_COLUMNS = new Set<string>(['workflow_json', 'parameters', 'required_labels', 'required_models']);

function columnValues(d: WorkflowDefinition): unknown[] {
  return DEF_COLUMNS.map((c) => {
    const v = (d as Record<string, unknown>)[c];
    if (JSONB_COLUMNS.has(c)) return json(v);
    return v === undefined ? null : v;
  });
}
const placeholder = (c: string): string => (JSONB_COLUMNS.has(c) ? '?::jsonb' : '?');

/** One cache per database per process: every WorkflowStore of a node shares (and invalidates) it. */
const sharedCaches = new WeakMap<Database, WorkflowCache>();

export class WorkflowStore {
  readonly cache: WorkflowCache;

  constructor(
    private readonly db: Database,
    opts: { cache?: WorkflowCache } = {},
  ) {
    let c = opts.cache ?? sharedCaches.get(db);
    if (!c) {
      c = new WorkflowCache();
      sharedCaches.set(db, c);
    }
    this.cache = c;
  }

  /**
   * Inserts version 1 of a validated definition (parseWorkflowCreate output) and its snapshot in
   * one transaction. 409 slug_taken when the slug exists in any team.
   */
  async create(teamId: string, def: WorkflowDefinition, opts: { createdBy?: string | undefined; note?: string; audit?: AuditNote } = {}): Promise<{ id: string; version: number; snapshotId: string }> {
    const id = uuidv7();
    const snapshotId = uuidv7();
    try {
      await inTx(this.db, async (qq) => {
        await qq(
          `insert into workflows (id, team_id, ${DEF_COLUMNS.join(', ')}, version, workflow_status, created_by)
           values (?, ?, ${DEF_COLUMNS.map(placeholder).join(', ')}, 1, 'active', ?)`,
          [id, teamId, ...columnValues(def), opts.createdBy ?? null],
        );
        await this.insertSnapshot(qq, { id: snapshotId, workflowId: id, teamId, version: 1, def, note: opts.note ?? 'created' });
        await recorderOn(qq, opts.audit)({ targetId: id, details: { workflow_slug: def.workflow_slug } });
      });
    } catch (e) {
      if (isUniqueViolation(e, 'workflows_slug_uq')) throw slugTaken(def.workflow_slug);
      throw e;
    } finally {
      await this.cache.invalidate(null);
    }
    return { id, version: 1, snapshotId };
  }

  private async insertSnapshot(qq: Q, s: { id: string; workflowId: string; teamId: string; version: number; def: WorkflowDefinition; note: string }): Promise<void> {
    await qq(
      `insert into workflow_snapshots (id, workflow_id, team_id, workflow_version, definition, snapshot_note) values (?, ?, ?, ?, ?::jsonb, ?)`,
      [s.id, s.workflowId, s.teamId, s.version, json(s.def), s.note],
    );
  }

  /** Newest first (created_at, then id: uuidv7 is time-ordered). */
  async list(teamId: string, page: PageRequest, filter: WorkflowListFilter = {}): Promise<{ items: WorkflowRecord[]; total: number }> {
    const where = ['team_id = ?'];
    const params: unknown[] = [teamId];
    if (filter.status !== undefined) {
      where.push('workflow_status = ?');
      params.push(filter.status);
    }
    if (filter.toolType !== undefined) {
      where.push('tool_type = ?');
      params.push(filter.toolType);
    }
    const w = where.join(' and ');
    const qq = q(this.db);
    const [count, rows] = await Promise.all([
      qq<{ n: number }>(`select count(*)::int as n from workflows where ${w}`, params),
      qq<WorkflowRow>(`select * from workflows where ${w} order by created_at desc, id desc limit ? offset ?`, [...params, page.perPage, page.offset]),
    ]);
    return { items: rows.map(rowToRecord), total: Number(count[0]?.n ?? 0) };
  }

  async get(teamId: string, id: string): Promise<WorkflowRecord | null> {
    const hit = this.cache.head(teamId, { id });
    if (hit) return hit;
    const gen = this.cache.generation();
    const rows = await q(this.db)<WorkflowRow>('select * from workflows where id = ? and team_id = ?', [id, teamId]);
    if (!rows[0]) return null;
    const r = rowToRecord(rows[0]);
    this.cache.putHead(r, gen);
    return r;
  }

  /**
   * By slug (current version), or slug@version through that version's snapshot. null when the
   * slug is not a workflow of this team; throws 404 workflow_version_not_found for a version the
   * workflow never had.
   */
  async getBySlug(teamId: string, slug: string, version?: number): Promise<WorkflowRecord | null> {
    let current = this.cache.head(teamId, { slug });
    if (!current) {
      const gen = this.cache.generation();
      const rows = await q(this.db)<WorkflowRow>('select * from workflows where workflow_slug = ? and team_id = ?', [slug, teamId]);
      const row = rows[0];
      if (!row) return null;
      current = rowToRecord(row);
      this.cache.putHead(current, gen);
    }
    if (version === undefined || version === current.version) return current;
    return this.atVersion(current, version);
  }

  /** The record as it was at `version` (status stays the current one). */
  private async atVersion(current: WorkflowRecord, version: number): Promise<WorkflowRecord> {
    const cached = this.cache.version(current.id, version);
    if (cached) return { ...current, definition: cached.definition, version, updatedAt: cached.createdAt };
    const gen = this.cache.generation();
    const snaps = await q(this.db)<SnapshotRow>('select * from workflow_snapshots where workflow_id = ? and team_id = ? and workflow_version = ?', [current.id, current.teamId, version]);
    const s = snaps[0];
    if (!s) throw notFound(`version ${version} of workflow ${JSON.stringify(current.definition.workflow_slug)} (latest is ${current.version})`, WORKFLOW_VERSION_NOT_FOUND);
    const definition = normalizeDefinition(jsonObject(s.definition));
    const createdAt = iso(s.created_at) ?? current.updatedAt;
    this.cache.putVersion(current.id, version, { definition, snapshotId: s.id, createdAt }, gen);
    return { ...current, definition, version, updatedAt: createdAt };
  }

  async find(teamId: string, ref: WorkflowRef): Promise<WorkflowRecord | null> {
    return 'id' in ref ? this.get(teamId, ref.id) : this.getBySlug(teamId, ref.slug, ref.version);
  }

  /**
   * Applies an update (parseWorkflowUpdate output): only the given fields change, the merged
   * definition is re-validated, version + 1 and its snapshot are written in one transaction.
   * null when the workflow is not in this team; 409 slug_taken / workflow_version_conflict.
   */
  async update(teamId: string, id: string, patch: WorkflowUpdate, audit?: AuditNote): Promise<{ id: string; version: number; snapshotId: string } | null> {
    let slug: string | undefined;
    try {
      return await inTx(this.db, async (qq) => {
        const rows = await qq<WorkflowRow>('select * from workflows where id = ? and team_id = ?', [id, teamId]);
        if (!rows[0]) return null;
        const current = rowToRecord(rows[0]);
        const next = mergeWorkflowUpdate(current.definition, patch);
        slug = next.workflow_slug;
        const status = patch.workflow_status ?? current.status;
        const version = current.version + 1;
        const updated = await qq(
          `update workflows set ${DEF_COLUMNS.map((c) => `${c} = ${placeholder(c)}`).join(', ')}, version = ?, workflow_status = ?, updated_at = now()
           where id = ? and team_id = ? and version = ? returning id`,
          [...columnValues(next), version, status, id, teamId, current.version],
        );
        if (updated.length === 0) {
          throw conflict('workflow_version_conflict', `workflow was modified concurrently (version ${current.version} is no longer current); fetch it and retry`);
        }
        const snapshotId = uuidv7();
        const changed = Object.keys(patch).filter((k) => k !== 'snapshot_note' && (patch as Record<string, unknown>)[k] !== undefined);
        await this.insertSnapshot(qq, { id: snapshotId, workflowId: id, teamId, version, def: next, note: patch.snapshot_note ?? `updated ${changed.join(', ')}` });
        await recorderOn(qq, audit)({ details: { version, changed } });
        return { id, version, snapshotId };
      });
    } catch (e) {
      if (slug !== undefined && isUniqueViolation(e, 'workflows_slug_uq')) throw slugTaken(slug);
      if (isUniqueViolation(e)) throw conflict('workflow_version_conflict', 'workflow was modified concurrently; fetch it and retry');
      throw e;
    } finally {
      await this.cache.invalidate(id);
    }
  }

  /** Hard delete (snapshots cascade). Tasks keep their own resolved copy. false when not in this team. */
  async delete(teamId: string, id: string, audit?: AuditNote): Promise<boolean> {
    try {
      return await audited(this.db, audit, async (qq, record) => {
        const rows = await qq('delete from workflows where id = ? and team_id = ? returning id', [id, teamId]);
        if (rows.length > 0) await record();
        return rows.length > 0;
      });
    } finally {
      await this.cache.invalidate(id, { dropVersions: true });
    }
  }

  /** Newest version first; null when the workflow is not in this team. */
  async listSnapshots(teamId: string, workflowId: string, page: PageRequest): Promise<{ items: SnapshotRecord[]; total: number } | null> {
    const qq = q(this.db);
    const exists = await qq('select 1 from workflows where id = ? and team_id = ?', [workflowId, teamId]);
    if (exists.length === 0) return null;
    const [count, rows] = await Promise.all([
      qq<{ n: number }>('select count(*)::int as n from workflow_snapshots where workflow_id = ? and team_id = ?', [workflowId, teamId]),
      qq<Pick<SnapshotRow, 'id' | 'workflow_id' | 'workflow_version' | 'snapshot_note' | 'created_at'>>(
        `select id, workflow_id, workflow_version, snapshot_note, created_at from workflow_snapshots
         where workflow_id = ? and team_id = ? order by workflow_version desc limit ? offset ?`,
        [workflowId, teamId, page.perPage, page.offset],
      ),
    ]);
    return { items: rows.map(rowToSnapshot), total: Number(count[0]?.n ?? 0) };
  }

  /**
   * The export document (the create shape; every ParameterDef carries its type; no ids) of the
   * current version or of `version`. Keys in create-schema order, so export -> import -> export
   * is byte-stable. null when not in this team; 404 workflow_version_not_found for a missing version.
   */
  async exportDefinition(teamId: string, id: string, version?: number): Promise<WorkflowDefinition | null> {
    const current = await this.get(teamId, id);
    if (!current) return null;
    if (version === undefined || version === current.version) return current.definition;
    return (await this.atVersion(current, version)).definition;
  }

  /**
   * For the run endpoints: the definition of the pinned version (the current one when no version
   * is given) and the snapshot id the task records, read in one query from the snapshot table.
   * Throws 404 workflow_not_found (unknown or foreign), 404 workflow_version_not_found, and
   * 409 workflow_archived when the workflow is archived (whatever the version asked for).
   */
  async resolveForRun(teamId: string, ref: WorkflowRef): Promise<RunnableWorkflow> {
    const byId = 'id' in ref;
    const version = byId ? undefined : ref.version;
    // warm: the head (current version + status) and the immutable version, no PostgreSQL read
    const head = this.cache.head(teamId, byId ? { id: ref.id } : { slug: ref.slug });
    if (head) {
      const v = version ?? head.version;
      const cached = this.cache.version(head.id, v);
      if (cached) return runnable(head, v, cached.definition, cached.snapshotId);
    }
    const gen = this.cache.generation();
    const rows = await q(this.db)<RunRow>(
      `select w.*, w.version as current_version,
              s.id as snapshot_id, s.workflow_version as snapshot_version, s.definition as snapshot_definition, s.created_at as snapshot_created_at
       from workflows w
       left join workflow_snapshots s on s.workflow_id = w.id and s.workflow_version = coalesce(?::int, w.version)
       where w.team_id = ? and ${byId ? 'w.id = ?' : 'w.workflow_slug = ?'}`,
      [version ?? null, teamId, byId ? ref.id : ref.slug],
    );
    const r = rows[0];
    if (!r) throw workflowNotFound();
    const current = rowToRecord(r);
    this.cache.putHead(current, gen);
    if (r.snapshot_id === null || r.snapshot_id === undefined) {
      throw notFound(`version ${version ?? r.current_version} of workflow ${JSON.stringify(r.workflow_slug)} (latest is ${r.current_version})`, WORKFLOW_VERSION_NOT_FOUND);
    }
    const v = Number(r.snapshot_version);
    const definition = normalizeDefinition(jsonObject(r.snapshot_definition));
    const snapshotId = r.snapshot_id;
    this.cache.putVersion(current.id, v, { definition, snapshotId, createdAt: iso(r.snapshot_created_at) ?? current.updatedAt }, gen);
    return runnable(current, v, definition, snapshotId);
  }
}

/** The run view of a workflow; an archived workflow cannot run, whatever the version asked for. */
function runnable(head: WorkflowRecord, version: number, workflow: WorkflowDefinition, snapshotId: string): RunnableWorkflow {
  if (head.status === 'archived') {
    throw conflict('workflow_archived', `workflow ${JSON.stringify(head.definition.workflow_slug)} is archived and cannot be run; set workflow_status to active to run it again`);
  }
  return { workflow, workflowId: head.id, workflowSlug: head.definition.workflow_slug, version, snapshotId, status: head.status };
}
