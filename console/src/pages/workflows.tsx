/** Workflows: the list (create from a JSON file), and a workflow's detail with versions, snapshots and the run form. */
import { useState } from 'preact/hooks';
import type { paths } from '@gantry/sdk';

type WorkflowCreate = NonNullable<paths['/workflows']['post']['requestBody']>['content']['application/json'];
import { api, data, sdk } from '../session.ts';
import { navigate } from '../router.ts';
import { DataTable, ErrorBox, fmtTime, Notice, Pager, Status, useAction, useAsync } from '../ui.tsx';
import { GantryError } from '@gantry/sdk';

export interface ParameterDef {
  key: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'file' | 'json';
  label?: string;
  description?: string;
  required?: boolean;
  default?: unknown;
  min?: number;
  max?: number;
  options?: string[];
  accept?: string[];
  source_key?: string;
}

interface Workflow {
  id: string;
  workflow_slug: string;
  display_name: string;
  description?: string;
  parameters: ParameterDef[];
  tool_type: string;
  required_labels: string[];
  task_timeout: number;
  max_retries: number;
  preferred_gpu?: string;
  default_dispatch_target: string;
  min_vram_gb: number;
  required_models: string[];
  version: number;
  workflow_status: string;
  created_at: string;
  updated_at: string;
}

export function WorkflowsPage() {
  const [page, setPage] = useState(1);
  const list = useAsync((signal) => data(api.GET('/workflows', { params: { query: { current_page: page, per_page: 20 } }, signal })).then((b) => ({ items: b.workflow_list as unknown as Workflow[], page_meta: b.page_meta })), [page]);
  const create = useAction();
  const onFile = (ev: Event): void => {
    const input = ev.currentTarget as HTMLInputElement;
    const file = input.files?.[0];
    if (!file) return;
    void create
      .run(async () => {
        let doc: unknown;
        try {
          doc = JSON.parse(await file.text());
        } catch {
          throw new Error(`${file.name} is not valid JSON`);
        }
        // the document is checked by the server (400 naming the field); the SDK types the call
        const r = await data(api.POST('/workflows', { body: doc as WorkflowCreate }));
        navigate(`/workflows/${r.id}`);
      })
      .finally(() => (input.value = ''));
  };
  return (
    <>
      <h1>Workflows</h1>
      <section class="card" aria-labelledby="create-wf">
        <h2 id="create-wf">Create a workflow</h2>
        <p>
          Choose a JSON file holding the workflow create request (the same shape an export gives: <code>workflow_slug</code>, <code>display_name</code>, <code>workflow_json</code>, <code>parameters</code>, …).
        </p>
        <label for="workflow-file">Workflow JSON file</label>
        <input id="workflow-file" type="file" accept="application/json,.json" disabled={create.busy} onChange={onFile} />
        <ErrorBox error={create.error} />
      </section>
      <ErrorBox error={list.error} />
      <DataTable
        caption="Workflows of this team"
        rows={list.data?.items}
        rowKey={(w) => w.id}
        empty={<Notice>No workflows yet.</Notice>}
        columns={[
          { header: 'Name', cell: (w) => <a href={`/workflows/${w.id}`}>{w.display_name}</a> },
          { header: 'Slug', cell: (w) => <code>{w.workflow_slug}</code> },
          { header: 'Tool', cell: (w) => w.tool_type },
          { header: 'Version', cell: (w) => w.version },
          { header: 'Status', cell: (w) => <Status value={w.workflow_status} /> },
          { header: 'Updated', cell: (w) => fmtTime(w.updated_at) },
        ]}
      />
      <Pager meta={list.data?.page_meta} page={page} onPage={setPage} />
    </>
  );
}

export function WorkflowPage({ id }: { id: string }) {
  const wf = useAsync((signal) => data(api.GET('/workflows/{workflowId}', { params: { path: { workflowId: id } }, signal })).then((x) => x as unknown as Workflow), [id]);
  const [snapPage, setSnapPage] = useState(1);
  const snaps = useAsync((signal) => data(api.GET('/workflows/{workflowId}/snapshots', { params: { path: { workflowId: id }, query: { current_page: snapPage, per_page: 20 } }, signal })).then((b) => ({ items: b.snapshot_list, page_meta: b.page_meta })), [id, snapPage]);
  const w = wf.data;
  if (wf.error) return <ErrorBox error={wf.error} />;
  if (!w) return <p aria-busy="true">Loading…</p>;
  return (
    <>
      <p class="crumbs">
        <a href="/workflows">Workflows</a> / {w.workflow_slug}
      </p>
      <h1>{w.display_name}</h1>
      {w.description ? <p>{w.description}</p> : null}
      <dl class="facts">
        <dt>Slug</dt>
        <dd>
          <code>{w.workflow_slug}</code>
        </dd>
        <dt>Version</dt>
        <dd>{w.version}</dd>
        <dt>Status</dt>
        <dd>
          <Status value={w.workflow_status} />
        </dd>
        <dt>Tool</dt>
        <dd>{w.tool_type}</dd>
        <dt>Required labels</dt>
        <dd>{w.required_labels.length ? w.required_labels.join(', ') : 'any agent'}</dd>
        <dt>Min VRAM</dt>
        <dd>{w.min_vram_gb ? `${w.min_vram_gb} GB` : 'none'}</dd>
        <dt>Timeout / retries</dt>
        <dd>
          {w.task_timeout ? `${w.task_timeout} s` : 'default'} / {w.max_retries}
        </dd>
        <dt>Tasks</dt>
        <dd>
          <a href={`/tasks?workflow_id=${w.id}`}>Tasks of this workflow</a>
        </dd>
      </dl>
      <RunForm workflow={w} />
      <section class="card" aria-labelledby="versions">
        <h2 id="versions">Versions and snapshots</h2>
        <ErrorBox error={snaps.error} />
        <DataTable
          rows={snaps.data?.items}
          rowKey={(s) => s.id}
          columns={[
            { header: 'Version', cell: (s) => s.workflow_version },
            { header: 'Note', cell: (s) => s.snapshot_note },
            { header: 'Created', cell: (s) => fmtTime(s.created_at) },
            {
              header: 'Pin',
              cell: (s) => (
                <code>
                  {w.workflow_slug}@{s.workflow_version}
                </code>
              ),
            },
          ]}
        />
        <Pager meta={snaps.data?.page_meta} page={snapPage} onPage={setSnapPage} />
      </section>
    </>
  );
}

type FieldValue = string | boolean | File | null;

function initialValue(d: ParameterDef): FieldValue {
  if (d.type === 'boolean') return d.default === true;
  if (d.type === 'file') return null;
  if (d.default === undefined || d.default === null) return '';
  return d.type === 'json' ? JSON.stringify(d.default) : String(d.default);
}

/** Client-side checks mirroring the server's (the server checks again; its 400 is shown too). */
function checkField(d: ParameterDef, v: FieldValue): { value?: unknown; problem?: string } {
  const empty = v === null || v === '';
  if (empty) return d.required && d.default === undefined ? { problem: 'is required' } : {};
  switch (d.type) {
    case 'boolean':
      return { value: v === true };
    case 'file':
      return { value: v };
    case 'integer':
    case 'number': {
      const n = Number(v);
      if (!Number.isFinite(n)) return { problem: 'must be a number' };
      if (d.type === 'integer' && !Number.isInteger(n)) return { problem: 'must be a whole number' };
      if (d.min !== undefined && n < d.min) return { problem: `must be at least ${d.min}` };
      if (d.max !== undefined && n > d.max) return { problem: `must be at most ${d.max}` };
      return { value: n };
    }
    case 'json':
      try {
        return { value: JSON.parse(String(v)) };
      } catch {
        return { problem: 'must be valid JSON' };
      }
    default:
      if (d.options && !d.options.includes(String(v))) return { problem: `must be one of ${d.options.join(', ')}` };
      return { value: String(v) };
  }
}

function RunForm({ workflow }: { workflow: Workflow }) {
  const defs = workflow.parameters.filter((d) => !d.source_key);
  const [values, setValues] = useState<Record<string, FieldValue>>(() => Object.fromEntries(defs.map((d) => [d.key, initialValue(d)])));
  const [problems, setProblems] = useState<Record<string, string>>({});
  const [stage, setStage] = useState('');
  const a = useAction();
  const set = (k: string, v: FieldValue): void => setValues({ ...values, [k]: v });

  const submit = (ev: Event): void => {
    ev.preventDefault();
    const found: Record<string, string> = {};
    const params: Record<string, unknown> = {};
    for (const d of defs) {
      const r = checkField(d, values[d.key] ?? null);
      if (r.problem) found[d.key] = r.problem;
      else if (r.value !== undefined) params[d.key] = r.value;
    }
    setProblems(found);
    if (Object.keys(found).length > 0) {
      a.setError(new Error(`Check the highlighted field${Object.keys(found).length > 1 ? 's' : ''}.`));
      const first = defs.find((d) => found[d.key]);
      if (first) document.getElementById(`param-${first.key}`)?.focus();
      return;
    }
    void a
      .run(async () => {
        for (const d of defs) {
          const f = params[d.key];
          if (d.type === 'file' && f instanceof File) {
            setStage(`Uploading ${f.name}…`);
            params[d.key] = await sdk.uploadFile(f, { fileName: f.name, ...(f.type ? { contentType: f.type } : {}) });
          }
        }
        setStage('Submitting…');
        const r = await sdk.run(workflow.id, params);
        navigate(`/tasks/${r.task_id}`);
      })
      .then((ok) => {
        setStage('');
        if (!ok) return;
      });
  };

  return (
    <section class="card" aria-labelledby="run">
      <h2 id="run">Run</h2>
      <form onSubmit={submit} noValidate>
        {defs.length === 0 ? <p>This workflow takes no parameters.</p> : null}
        {defs.map((d) => (
          <ParamField key={d.key} def={d} value={values[d.key] ?? null} problem={problems[d.key]} onChange={(v) => set(d.key, v)} />
        ))}
        <ErrorBox error={a.error instanceof GantryError || a.error instanceof Error ? a.error : null} />
        {stage ? <Notice>{stage}</Notice> : null}
        <button type="submit" class="primary" disabled={a.busy}>
          Run workflow
        </button>
      </form>
    </section>
  );
}

function ParamField({ def: d, value, problem, onChange }: { def: ParameterDef; value: FieldValue; problem: string | undefined; onChange: (v: FieldValue) => void }) {
  const id = `param-${d.key}`;
  const label = `${d.label ?? d.key}${d.required ? ' (required)' : ''}`;
  const help = [d.description, d.min !== undefined || d.max !== undefined ? `range ${d.min ?? '−∞'} to ${d.max ?? '∞'}` : '', d.accept ? `accepts ${d.accept.join(', ')}` : ''].filter(Boolean).join('; ');
  const describedBy = [help ? `${id}-help` : '', problem ? `${id}-problem` : ''].filter(Boolean).join(' ') || undefined;
  const common = { id, name: d.key, 'aria-invalid': problem ? ('true' as const) : undefined, 'aria-describedby': describedBy };
  let input: preact.JSX.Element;
  if (d.type === 'boolean')
    input = <input type="checkbox" {...common} checked={value === true} onChange={(e) => onChange(e.currentTarget.checked)} />;
  else if (d.type === 'file') input = <input type="file" {...common} accept={d.accept?.join(',')} onChange={(e) => onChange(e.currentTarget.files?.[0] ?? null)} />;
  else if (d.options)
    input = (
      <select {...common} value={String(value ?? '')} onChange={(e) => onChange(e.currentTarget.value)}>
        {!d.required || d.default === undefined ? <option value="">—</option> : null}
        {d.options.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </select>
    );
  else if (d.type === 'json') input = <textarea {...common} rows={4} value={String(value ?? '')} onInput={(e) => onChange(e.currentTarget.value)} />;
  else if (d.type === 'integer' || d.type === 'number')
    input = <input type="number" {...common} step={d.type === 'integer' ? 1 : 'any'} min={d.min} max={d.max} value={String(value ?? '')} onInput={(e) => onChange(e.currentTarget.value)} />;
  else input = <input type="text" {...common} value={String(value ?? '')} onInput={(e) => onChange(e.currentTarget.value)} />;
  return (
    <div class={`field${d.type === 'boolean' ? ' check' : ''}`}>
      <label for={id}>{label}</label>
      {input}
      {help ? (
        <small id={`${id}-help`} class="help">
          {help}
        </small>
      ) : null}
      {problem ? (
        <small id={`${id}-problem`} class="problem">
          {d.label ?? d.key} {problem}
        </small>
      ) : null}
    </div>
  );
}
