import { auditOf, teamPrincipalOf, uuidParam } from '../params.js';
/**
 * The workflow catalog over HTTP: the management surface (/workflows, user JWT or dk-) and the
 * runtime discovery surface (/r/workflows, also sk-). Run endpoints live with the tasks. The use
 * cases are src/app/workflows.ts; these routes decode the request and encode the answer.
 *
 * Roles (docs/api.md): every team member reads (list, get, snapshots, export); creating,
 * updating, deleting and importing need admin (api-decisions: "members run and read; admins manage
 * resources"). sk- callers never see workflow_json.
 */
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { invalidParameter } from '../../shared/errors.js';
import { parsePage } from '../../shared/pagination.js';
import { parseWorkflowCreate, parseWorkflowUpdate, workflowCreateSchema, workflowUpdateSchema, TOOL_TYPES, WORKFLOW_STATUSES, type ToolType, type WorkflowStatus } from '../../domain/workflows/schema.js';
import type { WorkflowListFilter, WorkflowUseCases } from '../../app/workflows.js';
import * as D from '../openapi/schemas.js';
import { z } from 'zod';

const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };
const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };

const LIST_QUERY = z.object({ workflow_status: z.enum(WORKFLOW_STATUSES).optional(), tool_type: z.enum(TOOL_TYPES).optional() });
const WORKFLOW_PAGE = D.pageOf('workflow_list', D.Workflow);

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

export function workflowRoutes(w: WorkflowUseCases): RouteDef[] {
  const list = async (ctx: Ctx): Promise<unknown> => {
    const page = parsePage(ctx.query);
    return w.listWorkflows(teamPrincipalOf(ctx), page, listFilter(ctx));
  };

  const getById = async (ctx: Ctx): Promise<unknown> => w.getWorkflow(teamPrincipalOf(ctx), uuidParam(ctx, 'workflowId'));

  /** Create and import take the same shape (the export shape is the create shape); only the note differs. */
  const create = (note: 'created' | 'imported') => async (ctx: Ctx): Promise<unknown> => {
    const def = parseWorkflowCreate(ctx.body);
    return w.createWorkflow(teamPrincipalOf(ctx), def, note, auditOf(ctx, note === 'created' ? 'workflow.create' : 'workflow.import', 'workflow'));
  };

  return [
    // ---- management ----
    { method: 'GET', path: '/workflows', auth: READ, handler: list, doc: { summary: 'List workflows', tags: ['workflows'], paged: true, query: LIST_QUERY, responses: { 200: WORKFLOW_PAGE } } },
    { method: 'POST', path: '/workflows', auth: MANAGE, handler: create('created'), doc: { summary: 'Create a workflow', tags: ['workflows'], body: workflowCreateSchema, responses: { 200: D.WorkflowWriteResult }, errors: [409] } },
    {
      method: 'POST',
      path: '/workflows/import',
      doc: { summary: 'Import a workflow (the export shape)', tags: ['workflows'], body: workflowCreateSchema, responses: { 200: D.WorkflowWriteResult }, errors: [409] },
      auth: MANAGE,
      // The export shape is the create shape: same validation, new id, version 1.
      handler: create('imported'),
    },
    { method: 'GET', path: '/workflows/{workflowId}', auth: READ, handler: getById, doc: { summary: 'Get a workflow', tags: ['workflows'], responses: { 200: D.Workflow } } },
    {
      method: 'PUT',
      path: '/workflows/{workflowId}',
      doc: { summary: 'Update a workflow (bumps version, writes a snapshot)', tags: ['workflows'], body: workflowUpdateSchema, responses: { 200: D.WorkflowWriteResult }, errors: [409] },
      auth: MANAGE,
      handler: async (ctx) => {
        const id = uuidParam(ctx, 'workflowId');
        const patch = parseWorkflowUpdate(ctx.body);
        return w.updateWorkflow(teamPrincipalOf(ctx), id, patch, auditOf(ctx, 'workflow.update', 'workflow', id));
      },
    },
    {
      method: 'DELETE',
      path: '/workflows/{workflowId}',
      doc: { summary: 'Delete a workflow', tags: ['workflows'], responses: { 200: D.Success } },
      auth: MANAGE,
      handler: async (ctx) => {
        const id = uuidParam(ctx, 'workflowId');
        return w.deleteWorkflow(teamPrincipalOf(ctx), id, auditOf(ctx, 'workflow.delete', 'workflow', id));
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
        return w.listSnapshots(teamPrincipalOf(ctx), id, page);
      },
    },
    {
      method: 'GET',
      path: '/workflows/{workflowId}/export',
      doc: { summary: 'Export a workflow (the create shape)', tags: ['workflows'], query: z.object({ version: z.int().min(1).optional() }), responses: { 200: D.WorkflowExport } },
      auth: READ,
      handler: async (ctx) => {
        const id = uuidParam(ctx, 'workflowId');
        return w.exportWorkflow(teamPrincipalOf(ctx), id, versionQuery(ctx));
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
      handler: async (ctx) => w.getWorkflowBySlug(teamPrincipalOf(ctx), ctx.params.workflowSlug ?? ''),
    },
  ];
}
