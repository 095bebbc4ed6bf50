/**
 * Usage accounting and GPU budgets (docs/api.md "Usage and GPU budgets"). Every attempt of a task
 * records what it used when it ends (the task store writes the row in the statement of the
 * attempt's terminal transition); these use cases read and aggregate those rows, keep the monthly
 * GPU-hour budgets, and refuse new runs of a team or credential whose month is used up. The clock
 * is a dependency (`now`), so a test moves to the next month without waiting.
 */
import { z } from 'zod';
import type { TeamPrincipal } from '../identity/principal.js';
import type { AuditNote } from '../shared/audit.js';
import { monthOf, USAGE_GROUP_FIELDS, USAGE_GROUPS, USAGE_SUM_FIELDS, type UsageAggregate, type UsageBudget, type UsageGroupBy, type UsageSums } from '../domain/usage.js';
import { AppError, fromZodIssues, invalidParameter, notFound } from '../shared/errors.js';
import { paged, pageMeta, type PageRequest } from '../shared/pagination.js';

/** The usage store (src/persistence/usage-store.ts PgUsageStore). */
export interface UsageStore {
  aggregate(teamId: string, groupBy: UsageGroupBy, from: number, to: number, limit: number, offset: number): Promise<{ rows: UsageAggregate[]; total: number; totals: UsageSums }>;
  monthGpuSeconds(teamId: string, credentialId: string | null, month: number): Promise<number>;
  budgets(teamId: string): Promise<UsageBudget[]>;
  applicableBudgets(teamId: string, credentialId: string | null, month: number): Promise<Array<UsageBudget & { usedGpuSeconds: number }>>;
  setBudget(teamId: string, credentialId: string | null, gpuHours: number, audit?: AuditNote): Promise<UsageBudget>;
  clearBudget(teamId: string, credentialId: string | null, audit?: AuditNote): Promise<boolean>;
  credentialInTeam(teamId: string, credentialId: string): Promise<boolean>;
}

export interface UsageDeps {
  store: UsageStore;
  now: () => number;
}

/** A bound of the range: an ISO 8601 date-time, or a date (YYYY-MM-DD, midnight UTC). */
const bound = z.union([z.iso.date(), z.iso.datetime({ offset: true })]);

/** GET /usage query (besides current_page and per_page). */
export const UsageQuery = z.strictObject({
  group_by: z.enum(USAGE_GROUPS).default('day'),
  from: bound.optional().describe('start of the range, inclusive (default: the first day of the current month, UTC)'),
  to: bound.optional().describe('end of the range, exclusive (default: the first day of the next month, UTC)'),
  format: z.enum(['json', 'csv']).optional().describe('csv: the groups of the page as text/csv with a header row (also chosen by Accept: text/csv)'),
});

/** Longest range GET /usage aggregates. */
export const USAGE_MAX_RANGE_DAYS = 400;

/** PUT /usage/budgets body; DELETE /usage/budgets takes credential_id as a query parameter. */
export const BudgetBody = z.strictObject({
  gpu_hours: z.number().min(0).max(10_000_000).describe('GPU-hours per calendar month (UTC); 0 refuses every run'),
  credential_id: z.uuid().optional().describe('the budget of this credential of the team; omitted: the whole team'),
});

export interface BudgetView {
  id: string;
  credential_id: string | null;
  gpu_hours: number;
  used_gpu_hours: number;
  is_exhausted: boolean;
  period_start: string;
  reset_at: string;
  updated_at: string;
}

export type UsageAnswer = { kind: 'json'; body: Record<string, unknown> } | { kind: 'csv'; text: string; fileName: string };

const hours = (s: number): number => Math.round((s / 3600) * 1e6) / 1e6;

/** One CSV field (RFC 4180: quoted when it holds a comma, quote or line break). */
const csvField = (v: string | number | null): string => {
  const s = v === null ? '' : String(v);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
};

export class UsageUseCases {
  constructor(private readonly d: UsageDeps) {}

  /** GET /usage: the team's attempts of [from, to) grouped by group_by, one page of groups, JSON or CSV. */
  async usage(p: TeamPrincipal, query: Record<string, string>, page: PageRequest, wantsCsv: boolean): Promise<UsageAnswer> {
    const rest = Object.fromEntries(Object.entries(query).filter(([k]) => k !== 'current_page' && k !== 'per_page'));
    const parsed = UsageQuery.safeParse(rest);
    if (!parsed.success) throw fromZodIssues(parsed.error.issues);
    const q = parsed.data;
    const month = monthOf(this.d.now());
    const from = q.from ? Date.parse(q.from.length === 10 ? `${q.from}T00:00:00Z` : q.from) : month.start;
    const to = q.to ? Date.parse(q.to.length === 10 ? `${q.to}T00:00:00Z` : q.to) : month.reset;
    if (!(from < to)) throw invalidParameter('to: must be after from');
    if (to - from > USAGE_MAX_RANGE_DAYS * 86_400_000) throw invalidParameter(`to: the range may span at most ${USAGE_MAX_RANGE_DAYS} days`);
    const r = await this.d.store.aggregate(p.teamId, q.group_by, from, to, page.perPage, page.offset);
    if (q.format === 'csv' || (q.format === undefined && wantsCsv)) {
      const cols = [...USAGE_GROUP_FIELDS[q.group_by], ...USAGE_SUM_FIELDS];
      const lines = [cols.join(','), ...r.rows.map((row) => cols.map((c) => csvField(row[c] ?? null)).join(','))];
      return { kind: 'csv', text: `${lines.join('\r\n')}\r\n`, fileName: `usage-${q.group_by}-${new Date(from).toISOString().slice(0, 10)}.csv` };
    }
    return {
      kind: 'json',
      body: { ...paged('usage_list', r.rows, page, r.total), group_by: q.group_by, from: new Date(from).toISOString(), to: new Date(to).toISOString(), usage_totals: r.totals },
    };
  }

  /** GET /usage/budgets: the team's budgets with this month's use. */
  async listBudgets(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    const all = await this.d.store.budgets(p.teamId);
    const views = await Promise.all(all.slice(page.offset, page.offset + page.perPage).map((b) => this.view(b)));
    return { budget_list: views, page_meta: pageMeta(page, all.length) };
  }

  /** PUT /usage/budgets: sets the team's (or one credential's) monthly GPU-hour budget. */
  async setBudget(p: TeamPrincipal, body: unknown, audit?: AuditNote): Promise<BudgetView> {
    const parsed = BudgetBody.safeParse(body ?? {});
    if (!parsed.success) throw fromZodIssues(parsed.error.issues);
    const credentialId = parsed.data.credential_id?.toLowerCase() ?? null;
    if (credentialId && !(await this.d.store.credentialInTeam(p.teamId, credentialId))) throw notFound('credential', 'credential_not_found');
    return this.view(await this.d.store.setBudget(p.teamId, credentialId, parsed.data.gpu_hours, audit));
  }

  /** DELETE /usage/budgets[?credential_id=]: removes it (404 budget_not_found when there is none). */
  async clearBudget(p: TeamPrincipal, query: Record<string, string>, audit?: AuditNote): Promise<{ is_success: true }> {
    const parsed = z.strictObject({ credential_id: z.uuid().optional() }).safeParse(query);
    if (!parsed.success) throw fromZodIssues(parsed.error.issues);
    if (!(await this.d.store.clearBudget(p.teamId, parsed.data.credential_id?.toLowerCase() ?? null, audit))) throw notFound('budget', 'budget_not_found');
    return { is_success: true };
  }

  /**
   * The run gate (both run endpoints and the MCP run tools, through TaskUseCases): 429
   * gpu_budget_exhausted when the month's GPU-hours of the team, or of the calling credential, are
   * at or over its budget; Retry-After and reset_at name the reset (the next calendar month, UTC).
   * Usage counts attempts that have ended (a running attempt is counted when it ends).
   */
  async checkRun(p: TeamPrincipal): Promise<void> {
    const now = this.d.now();
    const { start, reset } = monthOf(now);
    for (const b of await this.d.store.applicableBudgets(p.teamId, p.credentialId ?? null, start)) {
      const seconds = b.usedGpuSeconds;
      if (seconds < b.gpuHours * 3600) continue;
      const resetAt = new Date(reset).toISOString();
      const whose = b.credentialId === null ? "the team's" : "this credential's";
      throw new AppError('rate_limited', 'gpu_budget_exhausted', `${whose} monthly GPU budget of ${b.gpuHours} GPU-hours is used up (${hours(seconds)} GPU-hours this month); it resets at ${resetAt}`, {
        retryAfterS: Math.max(1, Math.ceil((reset - now) / 1000)),
        fields: { reset_at: resetAt },
      });
    }
  }

  private async view(b: UsageBudget): Promise<BudgetView> {
    const { start, reset } = monthOf(this.d.now());
    const seconds = await this.d.store.monthGpuSeconds(b.teamId, b.credentialId, start);
    return {
      id: b.id,
      credential_id: b.credentialId,
      gpu_hours: b.gpuHours,
      used_gpu_hours: hours(seconds),
      is_exhausted: seconds >= b.gpuHours * 3600,
      period_start: new Date(start).toISOString(),
      reset_at: new Date(reset).toISOString(),
      updated_at: new Date(b.updatedAt).toISOString(),
    };
  }
}
