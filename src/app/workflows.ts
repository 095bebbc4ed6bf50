/**
 * The workflow catalog use cases: the management surface (create, import, update, delete,
 * snapshots, export) and the runtime discovery (list, get by id or slug). Runs are task use cases
 * (src/app/tasks.ts). Integration (sk-) callers never see workflow_json.
 */
import type { TeamPrincipal } from '../identity/principal.js';
import { parseSlugRef, WORKFLOW_NOT_FOUND, type SnapshotRecord, type WorkflowListFilter, type WorkflowRecord } from '../domain/workflows/records.js';
import type { WorkflowDefinition, WorkflowUpdate } from '../domain/workflows/schema.js';
import type { AuditNote } from '../shared/audit.js';
import { notFound, type AppError } from '../shared/errors.js';
import { paged, type PageRequest } from '../shared/pagination.js';

/** The workflow store (src/persistence/workflow-store.ts WorkflowStore). */
export interface WorkflowCatalog {
  create(teamId: string, def: WorkflowDefinition, opts?: { createdBy?: string | undefined; note?: string; audit?: AuditNote }): Promise<{ id: string }>;
  list(teamId: string, page: PageRequest, filter?: WorkflowListFilter): Promise<{ items: WorkflowRecord[]; total: number }>;
  get(teamId: string, id: string): Promise<WorkflowRecord | null>;
  getBySlug(teamId: string, slug: string, version?: number): Promise<WorkflowRecord | null>;
  update(teamId: string, id: string, patch: WorkflowUpdate, audit?: AuditNote): Promise<{ id: string } | null>;
  delete(teamId: string, id: string, audit?: AuditNote): Promise<boolean>;
  listSnapshots(teamId: string, workflowId: string, page: PageRequest): Promise<{ items: SnapshotRecord[]; total: number } | null>;
  exportDefinition(teamId: string, id: string, version?: number): Promise<WorkflowDefinition | null>;
}

export type { WorkflowListFilter };

const workflowNotFound = (): AppError => notFound('workflow', WORKFLOW_NOT_FOUND);

const includeJson = (p: TeamPrincipal): boolean => p.kind !== 'integration';

/**
 * The Workflow read shape, exactly the spec's fields in the spec's order. description and
 * preferred_gpu are strings (the contract's type): "" when unset. workflow_json is omitted for
 * integration (sk-) callers.
 */
export function workflowRead(w: WorkflowRecord, opts: { includeJson: boolean }): Record<string, unknown> {
  const d = w.definition;
  const out: Record<string, unknown> = {
    id: w.id,
    workflow_slug: d.workflow_slug,
    display_name: d.display_name,
    description: d.description ?? '',
  };
  if (opts.includeJson) out.workflow_json = d.workflow_json;
  Object.assign(out, {
    parameters: d.parameters,
    tool_type: d.tool_type,
    required_labels: d.required_labels,
    task_timeout: d.task_timeout,
    max_retries: d.max_retries,
    preferred_gpu: d.preferred_gpu ?? '',
    default_dispatch_target: d.default_dispatch_target,
    min_vram_gb: d.min_vram_gb,
    required_models: d.required_models,
    // an extension of the contract: present only when the workflow sets it
    ...(d.default_priority != null ? { default_priority: d.default_priority } : {}),
    version: w.version,
    workflow_status: w.status,
    created_at: w.createdAt,
    updated_at: w.updatedAt,
  });
  return out;
}

export class WorkflowUseCases {
  constructor(private readonly store: WorkflowCatalog) {}

  async listWorkflows(p: TeamPrincipal, page: PageRequest, filter: WorkflowListFilter): Promise<Record<string, unknown>> {
    const { items, total } = await this.store.list(p.teamId, page, filter);
    const inc = includeJson(p);
    return paged('workflow_list', items.map((w) => workflowRead(w, { includeJson: inc })), page, total);
  }

  /** One workflow by id (a lower-cased UUID); 404 workflow_not_found. */
  async getWorkflow(p: TeamPrincipal, id: string): Promise<Record<string, unknown>> {
    const w = await this.store.get(p.teamId, id);
    if (!w) throw workflowNotFound();
    return workflowRead(w, { includeJson: includeJson(p) });
  }

  /** One workflow by slug reference (`slug`, or `slug@version` for a pinned version); 400 for a malformed reference. */
  async getWorkflowBySlug(p: TeamPrincipal, slugRef: string): Promise<Record<string, unknown>> {
    const ref = parseSlugRef(slugRef);
    const w = await this.store.getBySlug(p.teamId, ref.slug, ref.version);
    if (!w) throw workflowNotFound();
    return workflowRead(w, { includeJson: includeJson(p) });
  }

  /** Create and import take the same shape (the export shape is the create shape); only the note differs. */
  async createWorkflow(p: TeamPrincipal, def: WorkflowDefinition, note: 'created' | 'imported', audit: AuditNote): Promise<{ id: string }> {
    const r = await this.store.create(p.teamId, def, { createdBy: p.userId, note, audit });
    return { id: r.id };
  }

  /** Bumps the version and writes a snapshot. */
  async updateWorkflow(p: TeamPrincipal, id: string, patch: WorkflowUpdate, audit: AuditNote): Promise<{ id: string }> {
    const r = await this.store.update(p.teamId, id, patch, audit);
    if (!r) throw workflowNotFound();
    return { id: r.id };
  }

  async deleteWorkflow(p: TeamPrincipal, id: string, audit: AuditNote): Promise<{ is_success: true }> {
    if (!(await this.store.delete(p.teamId, id, audit))) throw workflowNotFound();
    return { is_success: true };
  }

  async listSnapshots(p: TeamPrincipal, id: string, page: PageRequest): Promise<Record<string, unknown>> {
    const r = await this.store.listSnapshots(p.teamId, id, page);
    if (!r) throw workflowNotFound();
    const items = r.items.map((s) => ({ id: s.id, workflow_id: s.workflowId, workflow_version: s.version, created_at: s.createdAt, snapshot_note: s.note }));
    return paged('snapshot_list', items, page, r.total);
  }

  /** The create shape of the workflow (of `version` when given). */
  async exportWorkflow(p: TeamPrincipal, id: string, version: number | undefined): Promise<WorkflowDefinition> {
    const def = await this.store.exportDefinition(p.teamId, id, version);
    if (!def) throw workflowNotFound();
    return def;
  }
}
