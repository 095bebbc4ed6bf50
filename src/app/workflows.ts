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

/** A note on an accepted write (the write happened): `warning_code` and a sentence. */
export interface WriteWarning {
  warning_code: string;
  warning_message: string;
}

/** The class_types of a ComfyUI API-format graph (validated on parse: every node has one). */
function classTypesOf(graph: Record<string, unknown>): string[] {
  const out = new Set<string>();
  for (const node of Object.values(graph)) {
    const ct = (node as { class_type?: unknown } | null)?.class_type;
    if (typeof ct === 'string') out.add(ct);
  }
  return [...out];
}

/**
 * The node class_types the team's agents list (their ComfyUI's /object_info); null when no agent
 * of the team has reported any (nothing to compare with). AgentStore.teamNodeClasses.
 */
export type TeamNodeClasses = (teamId: string) => Promise<Set<string> | null>;

export class WorkflowUseCases {
  constructor(
    private readonly store: WorkflowCatalog,
    private readonly nodeClasses: TeamNodeClasses | null = null,
  ) {}

  /**
   * A ComfyUI graph whose class_types no agent of the team lists is still accepted (an agent with
   * the custom node may come later, or sync may install it) but the answer says so: otherwise the
   * first run fails on the agent with ComfyUI's "invalid prompt" minutes later.
   */
  private async warnings(p: TeamPrincipal, toolType: string | undefined, graph: Record<string, unknown> | undefined): Promise<WriteWarning[]> {
    if (!this.nodeClasses || graph === undefined || (toolType !== undefined && toolType !== 'comfyui')) return [];
    const known = await this.nodeClasses(p.teamId);
    if (!known) return [];
    const missing = classTypesOf(graph).filter((c) => !known.has(c)).sort();
    if (missing.length === 0) return [];
    const shown = missing.slice(0, 20).join(', ') + (missing.length > 20 ? `, and ${missing.length - 20} more` : '');
    return [
      {
        warning_code: 'class_type_not_on_agents',
        warning_message: `no agent of this team lists the node class_type(s) ${shown} (from their ComfyUI's /object_info): runs will fail until an agent with that custom node is online (install it, or add it to the team's custom nodes for sync)`,
      },
    ];
  }

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
  async createWorkflow(p: TeamPrincipal, def: WorkflowDefinition, note: 'created' | 'imported', audit: AuditNote): Promise<{ id: string; warnings?: WriteWarning[] }> {
    const r = await this.store.create(p.teamId, def, { createdBy: p.userId, note, audit });
    const warnings = await this.warnings(p, def.tool_type, def.workflow_json);
    return warnings.length ? { id: r.id, warnings } : { id: r.id };
  }

  /** Bumps the version and writes a snapshot. */
  async updateWorkflow(p: TeamPrincipal, id: string, patch: WorkflowUpdate, audit: AuditNote): Promise<{ id: string; warnings?: WriteWarning[] }> {
    const r = await this.store.update(p.teamId, id, patch, audit);
    if (!r) throw workflowNotFound();
    if (patch.workflow_json === undefined) return { id: r.id };
    const w = await this.store.get(p.teamId, id);
    const warnings = await this.warnings(p, w?.definition.tool_type, patch.workflow_json);
    return warnings.length ? { id: r.id, warnings } : { id: r.id };
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
