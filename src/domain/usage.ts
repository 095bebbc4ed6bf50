/**
 * Usage accounting (docs/api.md "Usage and GPU budgets"): what one attempt of a task used, the
 * aggregations of GET /usage and the monthly GPU-hour budgets. Written by the task store in the
 * statement that ends the attempt (src/persistence/task-store.ts), read by src/app/usage.ts.
 */

/** GET /usage `group_by` values. */
export const USAGE_GROUPS = ['day', 'workflow', 'workflow_version', 'credential', 'user'] as const;
export type UsageGroupBy = (typeof USAGE_GROUPS)[number];

/** The key columns of each grouping, in the order GET /usage (and its CSV) shows them. */
export const USAGE_GROUP_FIELDS: Record<UsageGroupBy, readonly string[]> = {
  day: ['day'],
  workflow: ['workflow_id', 'workflow_slug'],
  workflow_version: ['workflow_id', 'workflow_slug', 'workflow_version'],
  credential: ['credential_id'],
  user: ['user_id'],
};

/** The sums of a group of attempts (seconds, rounded to the millisecond). */
export interface UsageSums {
  attempt_count: number;
  gpu_seconds: number;
  gpu_hours: number;
  run_seconds: number;
  queue_wait_seconds: number;
  provisioning_seconds: number;
}

export const USAGE_SUM_FIELDS: ReadonlyArray<keyof UsageSums> = ['attempt_count', 'gpu_seconds', 'gpu_hours', 'run_seconds', 'queue_wait_seconds', 'provisioning_seconds'];

/** One aggregated row: the group's key fields (USAGE_GROUP_FIELDS; null = attempts without one) and its sums. */
export type UsageAggregate = Record<string, string | number | null> & UsageSums;

/** A monthly GPU-hour budget: of the whole team (credentialId null) or of one credential of the team. */
export interface UsageBudget {
  id: string;
  teamId: string;
  credentialId: string | null;
  gpuHours: number;
  createdAt: number;
  updatedAt: number;
}

/** The first instant of the calendar month (UTC) that holds `now`, and of the next one (the budget's reset). */
export function monthOf(now: number): { start: number; reset: number } {
  const d = new Date(now);
  const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  const reset = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return { start, reset };
}
