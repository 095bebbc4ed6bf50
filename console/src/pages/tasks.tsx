/** Tasks: a live list with filters, and a task's page (SSE progress, events, result preview, cancel, retry chain). */
import { useEffect, useState } from 'preact/hooks';
import type { Schemas } from '@gantry/sdk';
import { api, data, sdk } from '../session.ts';
import { navigate, useLocation } from '../router.ts';
import { DataTable, ErrorBox, errorText, fmtTime, Notice, Pager, short, Status, useAction, useAsync } from '../ui.tsx';

export const TASK_STATES = ['pending', 'waiting', 'provisioning', 'queued', 'running', 'completed', 'failed', 'cancelled'] as const;
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

interface Progress {
  progress: number;
  step_current: number;
  step_total: number;
  current_node: string;
  stage?: string;
  message?: string;
}

interface Task {
  task_id: string;
  workflow_id: string;
  workflow_slug: string;
  workflow_version: number;
  task_status: string;
  dispatch_target: string;
  agent_id: string | null;
  parameters: Record<string, unknown>;
  progress: Progress | null;
  attempt: number;
  parent_task_id: string | null;
  retry_task_id: string | null;
  task_error: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  /** why a pending/waiting task waits (the scheduler's words) */
  waiting_reason?: string;
}

export function TasksPage() {
  const { query } = useLocation();
  const status = query.get('task_status') ?? '';
  // the workflow filter takes a slug (or an id; links from a workflow's page pass workflow_id)
  const workflowRef = query.get('workflow') ?? query.get('workflow_id') ?? '';
  const [page, setPage] = useState(1);
  // what is typed in the workflow filter: kept across the list's 3 s refreshes (a controlled input
  // bound to the URL alone lost it on each re-render), replaced when the URL changes
  const [workflowDraft, setWorkflowDraft] = useState(workflowRef);
  useEffect(() => setWorkflowDraft(workflowRef), [workflowRef]);
  const list = useAsync(
    async (signal) => {
      const workflowId = !workflowRef ? '' : /^[0-9a-f-]{36}$/i.test(workflowRef) ? workflowRef : (await data(api.GET('/r/workflows/slug/{workflowSlug}', { params: { path: { workflowSlug: workflowRef } }, signal }))).id;
      const b = await data(api.GET('/r/tasks', { params: { query: { ...(status ? { task_status: status as Schemas['TaskStatus'] } : {}), ...(workflowId ? { workflow_id: workflowId } : {}), current_page: page, per_page: 20 } }, signal }));
      return { items: b.task_list as unknown as Task[], page_meta: b.page_meta };
    },
    [status, workflowRef, page],
    3000,
  );
  const setFilter = (k: string, v: string): void => {
    const q = new URLSearchParams(location.search);
    if (v) q.set(k, v);
    else q.delete(k);
    setPage(1);
    const s = q.toString();
    navigate(`/tasks${s ? `?${s}` : ''}`, true);
  };
  return (
    <>
      <h1>Tasks</h1>
      <form class="filters" role="search" onSubmit={(e) => e.preventDefault()}>
        <div class="field">
          <label for="filter-status">Status</label>
          <select id="filter-status" value={status} onChange={(e) => setFilter('task_status', e.currentTarget.value)}>
            <option value="">any</option>
            {TASK_STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </div>
        <div class="field">
          <label for="filter-workflow">Workflow</label>
          <input
            id="filter-workflow"
            value={workflowDraft}
            placeholder="slug (any)"
            onInput={(e) => setWorkflowDraft(e.currentTarget.value)}
            onChange={(e) => {
              const q = new URLSearchParams(location.search);
              q.delete('workflow_id');
              history.replaceState(null, '', `/tasks${q.toString() ? `?${q.toString()}` : ''}`);
              setFilter('workflow', e.currentTarget.value.trim());
            }}
          />
        </div>
      </form>
      <ErrorBox error={list.error} />
      <DataTable
        caption="Tasks, newest first; the list refreshes every 3 seconds"
        live
        rows={list.data?.items}
        rowKey={(t) => t.task_id}
        empty={<Notice>No tasks match.</Notice>}
        columns={[
          {
            header: 'Task',
            cell: (t) => (
              <a href={`/tasks/${t.task_id}`}>
                <code>{short(t.task_id)}</code>
              </a>
            ),
          },
          { header: 'Workflow', cell: (t) => `${t.workflow_slug}@${t.workflow_version}` },
          { header: 'Status', cell: (t) => <Status value={t.task_status} /> },
          { header: 'Progress', cell: (t) => (t.progress ? `${Math.round(t.progress.progress * 100)}%` : '—') },
          { header: 'Attempt', cell: (t) => t.attempt },
          { header: 'Created', cell: (t) => fmtTime(t.created_at) },
        ]}
      />
      <Pager meta={list.data?.page_meta} page={page} onPage={setPage} />
    </>
  );
}

interface LogLine {
  id: string | null;
  event: string;
  text: string;
  at: string;
}

interface Result {
  download_url: string | null;
  download_urls: Record<string, string> | null;
  output: { outputs?: Array<{ name: string; size: number; content_type: string }> } | null;
  expires_at: string;
}

/** An agent by its name (the id's first characters until the name has loaded, or when it is gone). */
function AgentName({ id }: { id: string }) {
  const [name, setName] = useState<string | null>(null);
  useEffect(() => {
    let live = true;
    void api.GET('/agents/{agentId}', { params: { path: { agentId: id } } }).then((r) => live && r.data && setName(r.data.display_name));
    return () => {
      live = false;
    };
  }, [id]);
  return name ? (
    <a href="/agents" title={id}>
      {name}
    </a>
  ) : (
    <code title={id}>{short(id)}</code>
  );
}

function describe(event: string, d: Record<string, any>): string {
  switch (event) {
    case 'status':
      return String(d.status);
    case 'progress':
      return `${Math.round(Number(d.progress) * 100)}% (step ${d.step_current}/${d.step_total})${d.current_node ? ` ${d.current_node}` : ''}${d.stage ? ` [${d.stage}]` : ''}${d.message ? ` ${d.message}` : ''}`;
    case 'completed':
      return '';
    case 'failed':
      return `${d.error ?? ''}${d.retry_task_id ? ` (retry ${short(d.retry_task_id)})` : ''}`;
    case 'cancelled':
      return '';
    default:
      return d.message ?? JSON.stringify(d);
  }
}

export function TaskPage({ id }: { id: string }) {
  const [task, setTask] = useState<Task | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [log, setLog] = useState<LogLine[]>([]);
  const [streamState, setStreamState] = useState('connecting');
  const [result, setResult] = useState<Result | null>(null);
  const [resultError, setResultError] = useState<unknown>(null);
  const cancel = useAction();

  useEffect(() => {
    const ac = new AbortController();
    setTask(null);
    setLog([]);
    setResult(null);
    setResultError(null);
    setError(null);
    const refresh = (): Promise<void> =>
      data(api.GET('/r/tasks/{taskId}', { params: { path: { taskId: id } }, signal: ac.signal })).then((t) => {
        if (!ac.signal.aborted) setTask(t as unknown as Task);
      });
    const run = async (): Promise<void> => {
      await refresh();
      setStreamState('live');
      for await (const ev of sdk.events(id, { signal: ac.signal, lastEventId: '0' })) {
        const d = ev.data as Record<string, any>;
        const event: string = ev.type;
        setLog((l) => [...l.slice(-199), { id: ev.id ?? null, event, text: describe(event, d), at: String(d.timestamp ?? d.completed_at ?? new Date().toISOString()) }]);
        setTask((t) => {
          if (!t) return t;
          if (event === 'progress') return { ...t, task_status: 'running', progress: { progress: Number(d.progress), step_current: d.step_current, step_total: d.step_total, current_node: d.current_node ?? '', stage: d.stage, message: d.message } };
          if (event === 'status' || TERMINAL.has(event)) return { ...t, task_status: String(d.status ?? event), ...(d.retry_task_id ? { retry_task_id: String(d.retry_task_id) } : {}), ...(event === 'failed' ? { task_error: String(d.error ?? '') } : {}) };
          return t;
        });
        if (TERMINAL.has(event)) await refresh();
      }
      if (!ac.signal.aborted) setStreamState('ended');
    };
    run().catch((e: unknown) => {
      if (ac.signal.aborted) return;
      setError(e);
      setStreamState('ended');
    });
    return () => ac.abort();
  }, [id]);

  const status = task?.task_status;
  const queued = status === 'pending' || status === 'waiting';
  // while it waits, why it waits (it changes as agents come and go): the task read again every 3 s
  useEffect(() => {
    if (!queued) return;
    const ac = new AbortController();
    const timer = setInterval(() => {
      data(api.GET('/r/tasks/{taskId}', { params: { path: { taskId: id } }, signal: ac.signal }))
        .then((t) => {
          if (!ac.signal.aborted) setTask((cur) => (cur ? { ...cur, waiting_reason: (t as unknown as Task).waiting_reason } : cur));
        })
        .catch(() => undefined);
    }, 3000);
    return () => {
      ac.abort();
      clearInterval(timer);
    };
  }, [id, queued]);
  useEffect(() => {
    if (status !== 'completed') return;
    data(api.GET('/r/tasks/{taskId}/result', { params: { path: { taskId: id } } })).then((r) => setResult(r as unknown as Result), setResultError);
  }, [id, status]);

  if (!task) return error ? <ErrorBox error={error} /> : <p aria-busy="true">Loading…</p>;
  const pct = status === 'completed' ? 100 : Math.round((task.progress?.progress ?? 0) * 100);
  const outputs = result?.output?.outputs ?? [];
  const primary = outputs[0];
  const isImage = primary?.content_type.startsWith('image/') ?? false;
  return (
    <>
      <p class="crumbs">
        <a href="/tasks">Tasks</a> / {short(task.task_id)}
      </p>
      <h1>
        Task <code>{short(task.task_id)}</code> <Status value={task.task_status} />
      </h1>
      <section class="card" aria-labelledby="progress-h">
        <h2 id="progress-h">Progress</h2>
        <label for="task-progress" class="sr-only">
          Task progress
        </label>
        <progress id="task-progress" max={100} value={pct} aria-valuetext={`${pct}%`}>
          {pct}%
        </progress>
        <p class="progress-line" role="status" aria-live="polite">
          <span data-testid="progress-percent">{pct}%</span>
          {task.progress?.step_total ? ` · step ${task.progress.step_current} of ${task.progress.step_total}` : ''}
          {task.progress?.current_node ? ` · ${task.progress.current_node}` : ''}
          {task.progress?.stage ? ` · stage ${task.progress.stage}` : ''}
          {` · stream ${streamState}`}
        </p>
        {queued && task.waiting_reason ? (
          <p class="notice" data-testid="waiting-reason">
            Waiting: {task.waiting_reason}
          </p>
        ) : null}
        {!TERMINAL.has(task.task_status) ? (
          <button type="button" class="danger" disabled={cancel.busy} onClick={() => void cancel.run(() => sdk.cancel(id))}>
            Cancel task
          </button>
        ) : null}
        <ErrorBox error={cancel.error} />
        {task.task_error ? (
          <p class="error" role="alert">
            {task.task_error}
          </p>
        ) : null}
        <ErrorBox error={error} />
      </section>
      {status === 'completed' ? (
        <section class="card" aria-labelledby="result-h">
          <h2 id="result-h">Result</h2>
          <ErrorBox error={resultError} />
          {result && primary && isImage && result.download_url ? <img class="preview" src={result.download_url} alt={`Result preview: ${primary.name}`} /> : null}
          {result?.download_url ? (
            <p>
              <a href={result.download_url} download={primary?.name ?? 'output'} class="button">
                Download {primary?.name ?? 'output'}
              </a>
              {primary ? ` (${primary.content_type}, ${primary.size} bytes)` : ''}
            </p>
          ) : null}
          {result?.download_urls ? (
            <ul>
              {Object.entries(result.download_urls).map(([name, url]) => (
                <li key={name}>
                  <a href={url} download={name}>
                    {name}
                  </a>
                </li>
              ))}
            </ul>
          ) : null}
          {result ? <small>Links work until {fmtTime(result.expires_at)}.</small> : null}
        </section>
      ) : null}
      <dl class="facts">
        <dt>Workflow</dt>
        <dd>
          <a href={`/workflows/${task.workflow_id}`}>
            {task.workflow_slug}@{task.workflow_version}
          </a>
        </dd>
        <dt>Attempt</dt>
        <dd>{task.attempt}</dd>
        <dt>Retry of</dt>
        <dd>{task.parent_task_id ? <a href={`/tasks/${task.parent_task_id}`}>{short(task.parent_task_id)}</a> : '—'}</dd>
        <dt>Retried as</dt>
        <dd>{task.retry_task_id ? <a href={`/tasks/${task.retry_task_id}`}>{short(task.retry_task_id)}</a> : '—'}</dd>
        <dt>Agent</dt>
        <dd>{task.agent_id ? <AgentName id={task.agent_id} /> : '—'}</dd>
        <dt>Dispatch</dt>
        <dd>{task.dispatch_target}</dd>
        <dt>Created</dt>
        <dd>{fmtTime(task.created_at)}</dd>
        <dt>Started</dt>
        <dd>{fmtTime(task.started_at)}</dd>
        <dt>Finished</dt>
        <dd>{fmtTime(task.finished_at)}</dd>
      </dl>
      <section class="card" aria-labelledby="params-h">
        <h2 id="params-h">Parameters</h2>
        <pre>{JSON.stringify(task.parameters, null, 2)}</pre>
      </section>
      <section class="card" aria-labelledby="events-h">
        <h2 id="events-h">Events</h2>
        {log.length === 0 ? <p>No events yet.</p> : null}
        <ol class="events" aria-live="polite">
          {log.map((l, i) => (
            <li key={`${l.id ?? 'x'}-${i}`}>
              <time>{fmtTime(l.at)}</time> <strong>{l.event}</strong>
              {l.text ? `: ${l.text}` : ''}
            </li>
          ))}
        </ol>
        {error ? <p>{errorText(error)}</p> : null}
      </section>
    </>
  );
}
