/**
 * Usage accounting and GPU budgets (docs/api.md "Usage and GPU budgets"), read and set by the
 * team's admins and owner (user JWT or dk-; sk- refused like every management route). The use
 * cases are src/app/usage.ts; these routes decode the query and body and encode the answer.
 *
 *   GET    /usage           {usage_list, page_meta, usage_totals, group_by, from, to}, or CSV (format=csv / Accept: text/csv)
 *   GET    /usage/budgets   {budget_list, page_meta}
 *   PUT    /usage/budgets   {gpu_hours, credential_id?} -> the budget
 *   DELETE /usage/budgets   ?credential_id -> {is_success}
 */
import { z } from 'zod';
import * as D from '../openapi/schemas.js';
import { BudgetBody, UsageQuery, type UsageUseCases } from '../../app/usage.js';
import { parsePage } from '../../shared/pagination.js';
import { TextReply, type RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, teamPrincipalOf } from '../params.js';

const ADMIN: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };

const sums = {
  attempt_count: z.int().describe('attempts (a retry is an attempt of its own)'),
  gpu_seconds: z.number().describe('run time x GPUs held, summed'),
  gpu_hours: z.number(),
  run_seconds: z.number().describe('ACK (running) to the end, summed'),
  queue_wait_seconds: z.number().describe('schedulable (created, or its retry backoff over) to assignment, summed'),
  provisioning_seconds: z.number().describe('assignment (provisioning or queued) to running, summed'),
};

export const UsageRow = D.named(
  'UsageRow',
  z.object({
    day: z.string().optional().describe('group_by=day: YYYY-MM-DD (UTC) of the attempts\' end'),
    workflow_id: z.string().optional(),
    workflow_slug: z.string().optional(),
    workflow_version: z.int().optional(),
    credential_id: z.string().nullable().optional().describe('group_by=credential: null for attempts of runs by a user session (JWT)'),
    user_id: z.string().nullable().optional(),
    ...sums,
  }),
);

const UsageResponse = z.object({
  usage_list: z.array(UsageRow),
  page_meta: D.PageMeta,
  usage_totals: D.named('UsageTotals', z.object(sums)),
  group_by: z.string(),
  from: z.string(),
  to: z.string(),
});

export const BudgetView = D.named(
  'UsageBudget',
  z.object({
    id: z.uuid(),
    credential_id: z.string().nullable().describe('null: the whole team'),
    gpu_hours: z.number(),
    used_gpu_hours: z.number().describe('GPU-hours of the attempts that ended this month'),
    is_exhausted: z.boolean(),
    period_start: z.string(),
    reset_at: z.string().describe('the first instant of the next calendar month, UTC'),
    updated_at: z.string(),
  }),
);

export function usageRoutes(usage: UsageUseCases): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/usage',
      auth: ADMIN,
      doc: {
        summary: "The team's usage: attempts aggregated by day, workflow, workflow version, credential or user (admin or owner)",
        description: 'format=csv (or Accept: text/csv) answers text/csv: a header row, then the groups of the page.',
        tags: ['usage'],
        query: UsageQuery,
        paged: true,
        responses: { 200: UsageResponse },
      },
      handler: async (c) => {
        const out = await usage.usage(teamPrincipalOf(c), Object.fromEntries(c.query), parsePage(c.query), /\btext\/csv\b/i.test(c.headers.accept ?? ''));
        if (out.kind === 'json') return out.body;
        return new TextReply(200, 'text/csv; charset=utf-8', out.text, { 'Content-Disposition': `attachment; filename="${out.fileName}"` });
      },
    },
    {
      method: 'GET',
      path: '/usage/budgets',
      auth: ADMIN,
      doc: { summary: "The team's monthly GPU-hour budgets and this month's use (admin or owner)", tags: ['usage'], paged: true, responses: { 200: D.pageOf('budget_list', BudgetView) } },
      handler: async (c) => usage.listBudgets(teamPrincipalOf(c), parsePage(c.query)),
    },
    {
      method: 'PUT',
      path: '/usage/budgets',
      auth: ADMIN,
      doc: { summary: 'Set the monthly GPU-hour budget of the team or of one credential (admin or owner)', tags: ['usage'], body: BudgetBody, responses: { 200: BudgetView }, errors: [404] },
      handler: async (c) => usage.setBudget(teamPrincipalOf(c), c.body, auditOf(c, 'usage_budget.set', 'usage_budget')),
    },
    {
      method: 'DELETE',
      path: '/usage/budgets',
      auth: ADMIN,
      doc: { summary: 'Remove the budget of the team (or of credential_id)', tags: ['usage'], query: z.object({ credential_id: z.uuid().optional() }), responses: { 200: D.Success }, errors: [404] },
      handler: async (c) => usage.clearBudget(teamPrincipalOf(c), Object.fromEntries(c.query), auditOf(c, 'usage_budget.delete', 'usage_budget')),
    },
  ];
}
