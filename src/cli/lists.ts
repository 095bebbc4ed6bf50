/**
 * The list commands of `gantry` (teams, workflows list, tasks list, agents list, containers list):
 * every one pages, one page (--page, --per-page) with a hint when more exist, or every page (--all).
 */
import { authedClient, c, CliError, EXIT, pct, print, printJson, readConfig, statusColor, table, unknownWorkflow, type GlobalOpts } from './client.js';

// ---- lists: every list pages (--page, --per-page, or --all) ----

export interface PageOpts {
  page?: string;
  perPage?: string;
  all?: boolean;
}

interface PageMeta {
  current_page: number;
  per_page: number;
  total_count: number;
}

function positive(v: string | undefined, name: string, dflt: number, max: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > max) throw new CliError(`${name} ${v}: expected a whole number from 1 to ${max}`, EXIT.usage);
  return n;
}

/**
 * One page of a list (--page, --per-page), or with --all every page (100 a request). Prints JSON (the
 * list under its key with page_meta) or a table and, when more pages exist, where the next one is.
 */
async function listCommand<T>(
  o: GlobalOpts & PageOpts,
  key: string,
  fetchPage: (current_page: number, per_page: number) => Promise<{ items: T[]; page_meta: PageMeta }>,
  render: (items: T[]) => void,
  defaultPerPage = 20,
): Promise<void> {
  const perPage = positive(o.perPage, '--per-page', o.all ? 100 : defaultPerPage, 100);
  let page = positive(o.page, '--page', 1, 1_000_000);
  const items: T[] = [];
  let meta: PageMeta;
  for (;;) {
    const r = await fetchPage(page, perPage);
    items.push(...r.items);
    meta = r.page_meta;
    if (!o.all || r.items.length === 0 || page * perPage >= meta.total_count) break;
    page++;
  }
  const pages = Math.max(1, Math.ceil(meta.total_count / perPage));
  const shownPage = o.all ? 1 : page;
  if (o.json) return printJson({ [key]: items, page_meta: o.all ? { current_page: 1, per_page: items.length, total_count: meta.total_count } : meta });
  render(items);
  if (!o.all && meta.total_count > items.length) {
    const next = shownPage < pages ? `--page ${shownPage + 1} for the next, ` : '';
    print(c.dim(`page ${shownPage} of ${pages} (${meta.total_count} in all): ${next}--all for every one`));
  }
}

export async function teams(o: GlobalOpts & PageOpts): Promise<void> {
  const gantry = authedClient(o);
  const current = readConfig()?.team_id;
  await listCommand(
    o,
    'team_list',
    async (current_page, per_page) => {
      const { data } = await gantry.api.GET('/teams', { params: { query: { per_page, current_page } } });
      return { items: data!.team_list, page_meta: data!.page_meta };
    },
    (items) => table(items.map((t) => ({ ...t, current: t.id === current ? '*' : '' })), ['current', 'id', 'display_name']),
  );
}

export async function workflowsList(o: GlobalOpts & PageOpts): Promise<void> {
  const gantry = authedClient(o);
  await listCommand(
    o,
    'workflow_list',
    async (current_page, per_page) => {
      const { data } = await gantry.api.GET('/r/workflows', { params: { query: { per_page, current_page } } });
      return { items: data!.workflow_list, page_meta: data!.page_meta };
    },
    (items) => table(items as unknown as Array<Record<string, unknown>>, ['workflow_slug', 'version', 'tool_type', 'display_name', 'id']),
  );
}

export async function tasksList(o: GlobalOpts & PageOpts & { status?: string; workflow?: string; limit?: string }): Promise<void> {
  const gantry = authedClient(o);
  const filter: Record<string, unknown> = {};
  if (o.status) filter.task_status = o.status;
  // --workflow takes a slug (or an id): the list filters by workflow id
  if (o.workflow) filter.workflow_id = (await gantry.getWorkflow(o.workflow).catch((e: unknown) => {
    throw unknownWorkflow(e, o.workflow as string);
  })).id;
  await listCommand(
    { ...o, perPage: o.perPage ?? o.limit },
    'task_list',
    async (current_page, per_page) => {
      const { data } = await gantry.api.GET('/r/tasks', { params: { query: { ...filter, per_page, current_page } as never } });
      return { items: data!.task_list, page_meta: data!.page_meta };
    },
    (items) =>
      table(
        items.map((t) => ({ ...t, task_status: statusColor(t.task_status), progress: t.progress ? pct(t.progress.progress).trim() : '' })),
        ['task_id', 'workflow_slug', 'task_status', 'progress', 'created_at'],
      ),
  );
}

export async function agentsList(o: GlobalOpts & PageOpts): Promise<void> {
  const gantry = authedClient(o);
  await listCommand(
    o,
    'agent_list',
    async (current_page, per_page) => {
      const { data } = await gantry.api.GET('/r/agents', { params: { query: { per_page, current_page } } });
      return { items: data!.agent_list, page_meta: data!.page_meta };
    },
    (items) => table(items.map((a) => ({ ...a, agent_status: statusColor(a.agent_status) })), ['id', 'display_name', 'agent_status', 'gpu_type', 'gpu_count', 'vram_total_gb', 'labels']),
  );
}

export async function containersList(o: GlobalOpts & PageOpts): Promise<void> {
  const gantry = authedClient(o);
  await listCommand(
    o,
    'container_list',
    async (current_page, per_page) => {
      const { data } = await gantry.api.GET('/containers', { params: { query: { per_page, current_page } } });
      return { items: data!.container_list, page_meta: data!.page_meta };
    },
    (items) => table(items.map((s) => ({ ...s, service_status: statusColor(s.service_status) })), ['service_slug', 'service_type', 'service_status', 'replica_count', 'docker_image', 'id']),
  );
}

