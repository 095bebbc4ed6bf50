import { auditOf, teamOf, uuidParam } from '../params.js';
/**
 * The workflow catalog over HTTP: the management surface (/workflows, user JWT or dk-) and the
 * runtime discovery surface (/r/workflows, also sk-). Run endpoints live with the tasks.
 *
 * Roles (docs/api.md): every team member reads (list, get, snapshots, export); creating,
 * updating, deleting and importing need admin (api-decisions: "members run and read; admins manage
 * resources"). sk- callers never see workflow_json.
 */
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { invalidParameter, notFound, type AppError } from '../../shared/errors.js';
import { paged, parsePage } from '../../shared/pagination.js';
import { parseWorkflowCreate, parseWorkflowUpdate, workflowCreateSchema, workflowUpdateSchema, TOOL_TYPES, WORKFLOW_STATUSES, type ToolType, type WorkflowStatus } from '../../domain/workflows/schema.js';
import { parseSlugRef, WORKFLOW_NOT_FOUND, type WorkflowListFilter, type WorkflowRecord, type WorkflowStore } from '../../persistence/workflow-store.js';
import * as D from '../openapi/schemas.js';
import { z } from 'zod';

export interface WorkflowRouteDeps {
  workflows: WorkflowStore;
}

const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };
const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

const LIST_QUERY = z.object({ workflow_status: z.enum(WORKFLOW_STATUSES).optional(), tool_type: z.enum(TOOL_TYPES).optional() });
const WORKFLOW_PAGE = D.pageOf('workflow_list', D.Workflow);

const workflowNotFound = (): AppError => notFound('workflow', WORKFLOW_NOT_FOUND);



function enumQuery<T extends string>(ctx: Ctx, name: string, allowed: readonly T[]): T | undefined {
  const v = ctx.query.get(name);
  if (v === null || v === '') return undefined;
  if (!(allowed as readonly string[]).includes(v)) throw invalidParameter(`${name}: must be one of ${allowed.join(', ')} (got ${JSON.stringify(v.slice(0, 80))})`);
  return v as T;
}

function listFilter(ctx: Ctx): WorkflowListFilter {
  return {
    status: enumQuery<WorkflowStatus>(ctx, 'workflow_status', WORKFLOW_STATUSES),
    toolType: enumQuery<ToolType>(ctx, 'tool_type', TOOL_TYPES),
  };
}

function versionQuery(ctx: Ctx): number | undefined {
  const v = ctx.query.get('version');
  if (v === null || v === '') return undefined;
  if (!/^[1-9][0-9]{0,8}$/.test(v)) throw invalidParameter(`version: must be a positive integer (got ${JSON.stringify(v.slice(0, 40))})`);
  return Number(v);
}

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
    version: w.version,
    workflow_status: w.status,
    created_at: w.createdAt,
    updated_at: w.updatedAt,
  });
  return out;
}

const includeJson = (ctx: Ctx): boolean => ctx.principal?.kind !== 'integration';

export function workflowRoutes(d: WorkflowRouteDeps): RouteDef[] {
  const store = d.workflows;

  const list = async (ctx: Ctx): Promise<unknown> => {
    const page = parsePage(ctx.query);
    const { items, total } = await store.list(teamOf(ctx), page, listFilter(ctx));
    const inc = includeJson(ctx);
    return paged('workflow_list', items.map((w) => workflowRead(w, { includeJson: inc })), page, total);
  };

  const getById = async (ctx: Ctx): Promise<unknown> => {
    const w = await store.get(teamOf(ctx), uuidParam(ctx, 'workflowId'));
    if (!w) throw workflowNotFound();
    return workflowRead(w, { includeJson: includeJson(ctx) });
  };

  /** Create and import take the same shape (the export shape is the create shape); only the note differs. */
  const create = (note: 'created' | 'imported') => async (ctx: Ctx): Promise<unknown> => {
    const def = parseWorkflowCreate(ctx.body);
    const r = await store.create(teamOf(ctx), def, { createdBy: ctx.principal?.userId, note, audit: auditOf(ctx, note === 'created' ? 'workflow.create' : 'workflow.import', 'workflow') });
    return { id: r.id };
  };

  return [
    // ---- management ----
    { method: 'GET', path: '/workflows', auth: READ, handler: list, doc: { summary: 'List workflows', tags: ['workflows'], paged: true, query: LIST_QUERY, responses: { 200: WORKFLOW_PAGE } } },
    { method: 'POST', path: '/workflows', auth: MANAGE, handler: create('created'), doc: { summary: 'Create a workflow', tags: ['workflows'], body: workflowCreateSchema, responses: { 200: D.IdResult }, errors: [409] } },
    {
      method: 'POST',
      path: '/workflows/import',
      doc: { summary: 'Import a workflow (the export shape)', tags: ['workflows'], body: workflowCreateSchema, responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      // The export shape is the create shape: same validation, new id, version 1.
      handler: async (ctx) => {
        const def = parseWorkflowCreate(ctx.body);
        const r = await store.create(teamOf(ctx), def, { createdBy: ctx.principal?.userId, note: 'imported', audit: auditOf(ctx, 'workflow.import', 'workflow') });
        return { id: r.id };
      },
    },
    { method: 'GET', path: '/workflows/{workflowId}', auth: READ, handler: getById, doc: { summary: 'Get a workflow', tags: ['workflows'], responses: { 200: D.Workflow } } },
    {
      method: 'PUT',
      path: '/workflows/{workflowId}',
      doc: { summary: 'Update a workflow (bumps version, writes a snapshot)', tags: ['workflows'], body: workflowUpdateSchema, responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      handler: async (ctx) => {
        const id = uuidParam(ctx, 'workflowId');
        const patch = parseWorkflowUpdate(ctx.body);
        const r = await store.update(teamOf(ctx), id, patch, auditOf(ctx, 'workflow.update', 'workflow', id));
        if (!r) throw workflowNotFound();
        return { id: r.id };
      },
    },
    {
      method: 'DELETE',
      path: '/workflows/{workflowId}',
      doc: { summary: 'Delete a workflow', tags: ['workflows'], responses: { 200: D.Success } },
      auth: MANAGE,
      handler: async (ctx) => {
        const id = uuidParam(ctx, 'workflowId');
        if (!(await store.delete(teamOf(ctx), id, auditOf(ctx, 'workflow.delete', 'workflow', id)))) throw workflowNotFound();
        return { is_success: true };
      },
    },
    {
      method: 'GET',
      path: '/workflows/{workflowId}/snapshots',
      doc: { summary: 'List a workflow\'s snapshots', tags: ['workflows'], paged: true, responses: { 200: D.pageOf('snapshot_list', D.Snapshot) } },
      auth: READ,
      handler: async (ctx) => {
        const id = uuidParam(ctx, 'workflowId');
        const page = parsePage(ctx.query);
        const r = await store.listSnapshots(teamOf(ctx), id, page);
        if (!r) throw workflowNotFound();
        const items = r.items.map((s) => ({ id: s.id, workflow_id: s.workflowId, workflow_version: s.version, created_at: s.createdAt, snapshot_note: s.note }));
        return paged('snapshot_list', items, page, r.total);
      },
    },
    {
      method: 'GET',
      path: '/workflows/{workflowId}/export',
      doc: { summary: 'Export a workflow (the create shape)', tags: ['workflows'], query: z.object({ version: z.int().min(1).optional() }), responses: { 200: D.WorkflowExport } },
      auth: READ,
      handler: async (ctx) => {
        const id = uuidParam(ctx, 'workflowId');
        const def = await store.exportDefinition(teamOf(ctx), id, versionQuery(ctx));
        if (!def) throw workflowNotFound();
        return def;
      },
    },

    // ---- runtime discovery ----
    { method: 'GET', path: '/r/workflows', auth: RUNTIME, handler: list, doc: { summary: 'List workflows (runtime)', tags: ['runtime', 'workflows'], paged: true, query: LIST_QUERY, responses: { 200: WORKFLOW_PAGE } } },
    { method: 'GET', path: '/r/workflows/{workflowId}', auth: RUNTIME, handler: getById, doc: { summary: 'Get a workflow (runtime)', tags: ['runtime', 'workflows'], responses: { 200: D.Workflow } } },
    {
      method: 'GET',
      path: '/r/workflows/slug/{workflowSlug}',
      doc: { summary: 'Get a workflow by slug (slug or slug@version)', tags: ['runtime', 'workflows'], responses: { 200: D.Workflow } },
      auth: RUNTIME,
      handler: async (ctx) => {
        const ref = parseSlugRef(ctx.params.workflowSlug ?? '');
        const w = await store.getBySlug(teamOf(ctx), ref.slug, ref.version);
        if (!w) throw workflowNotFound();
        return workflowRead(w, { includeJson: includeJson(ctx) });
      },
    },
  ];
}
