/**
 * Container services: the team's services with a form to create one (admins), and a service's page
 * (its settings, an edit form for admins, instances, deploy/start/stop/undeploy).
 */
import { useState } from 'preact/hooks';
import { api, data, useApp } from '../session.ts';
import { navigate } from '../router.ts';
import { DataTable, ErrorBox, fmtTime, Notice, Pager, short, Status, useAction, useAsync } from '../ui.tsx';

interface Service {
  id: string;
  service_slug: string;
  display_name: string;
  service_type: string;
  service_status: string;
  service_desc: string;
  docker_image: string;
  exposed_port: number;
  external_url: string;
  replica_count: number;
  gpu_count: number;
  /** Autoscaling (extension): on when max_replicas is set. */
  min_replicas?: number | null;
  max_replicas?: number | null;
  target_inflight_per_replica?: number | null;
  idle_timeout_s?: number | null;
  usage_prompt: string;
  required_labels: string[];
  health_path: string;
  env_config: Array<{ env_name: string; env_value: string }>;
  deploy_status?: { desired: number; placed: number; running: number; healthy: number; message: string; last_cold_start_ms?: number | null };
  instance_list?: Array<{ instance_id: string; agent_id: string; instance_status: string; healthy: boolean; instance_error: string | null; updated_at: string }>;
  updated_at: string;
}

/** The form's fields as typed (numbers and lists as text until submitted). */
interface FormState {
  display_name: string;
  service_slug: string;
  service_type: 'deployed' | 'external';
  docker_image: string;
  exposed_port: string;
  health_path: string;
  external_url: string;
  env: string;
  gpu_count: string;
  replica_count: string;
  /** Autoscaling: '' = not set (max_replicas '' = off). */
  min_replicas: string;
  max_replicas: string;
  target_inflight: string;
  idle_timeout_s: string;
  required_labels: string;
  service_desc: string;
}

const EMPTY: FormState = { display_name: '', service_slug: '', service_type: 'deployed', docker_image: '', exposed_port: '8080', health_path: '', external_url: 'https://', env: '', gpu_count: '0', replica_count: '1', min_replicas: '', max_replicas: '', target_inflight: '', idle_timeout_s: '', required_labels: '', service_desc: '' };

function formOf(s: Service): FormState {
  return {
    display_name: s.display_name,
    service_slug: s.service_slug,
    service_type: s.service_type === 'external' ? 'external' : 'deployed',
    docker_image: s.docker_image ?? '',
    exposed_port: String(s.exposed_port ?? ''),
    health_path: s.health_path ?? '',
    external_url: s.external_url ?? '',
    env: (s.env_config ?? []).map((e) => `${e.env_name}=${e.env_value}`).join('\n'),
    gpu_count: String(s.gpu_count),
    replica_count: String(s.replica_count),
    min_replicas: s.min_replicas == null ? '' : String(s.min_replicas),
    max_replicas: s.max_replicas == null ? '' : String(s.max_replicas),
    target_inflight: s.target_inflight_per_replica == null ? '' : String(s.target_inflight_per_replica),
    idle_timeout_s: s.idle_timeout_s == null ? '' : String(s.idle_timeout_s),
    required_labels: s.required_labels.join(', '),
    service_desc: s.service_desc ?? '',
  };
}

/** `NAME=value` lines (blank lines skipped; the value is everything after the first `=`). */
function parseEnv(text: string): Array<{ env_name: string; env_value: string }> {
  const out: Array<{ env_name: string; env_value: string }> = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    const eq = line.indexOf('=');
    if (eq <= 0) throw new Error(`Environment line ${i + 1}: write NAME=value`);
    out.push({ env_name: line.slice(0, eq).trim(), env_value: line.slice(eq + 1) });
  });
  return out;
}

function intOf(label: string, v: string): number {
  const n = Number(v.trim());
  if (v.trim() === '' || !Number.isInteger(n)) throw new Error(`${label} must be a whole number`);
  return n;
}

/** A whole number, or null when left empty. */
function optIntOf(label: string, v: string): number | null {
  return v.trim() === '' ? null : intOf(label, v);
}

/**
 * The autoscaling fields: all four when Max replicas is set (empty ones null: the server's
 * defaults); when it is empty, nothing on a create and all null on an edit (autoscaling off).
 */
function autoscaleBody(f: FormState, editing: boolean): Record<string, number | null> {
  const max = optIntOf('Max replicas', f.max_replicas);
  if (max === null) return editing ? { max_replicas: null, min_replicas: null, target_inflight_per_replica: null, idle_timeout_s: null } : {};
  return {
    max_replicas: max,
    min_replicas: optIntOf('Min replicas', f.min_replicas),
    target_inflight_per_replica: optIntOf('Target requests in flight per replica', f.target_inflight),
    idle_timeout_s: optIntOf('Idle timeout', f.idle_timeout_s),
  };
}

/** The request body of the form: every field for a create; for an edit the same fields (the API's PUT takes any of them). */
function bodyOf(f: FormState, editing = false) {
  const common = {
    display_name: f.display_name,
    service_slug: f.service_slug,
    service_desc: f.service_desc,
    required_labels: f.required_labels.split(',').map((l) => l.trim()).filter(Boolean),
  };
  if (f.service_type === 'external') return { ...common, external_url: f.external_url };
  return {
    ...common,
    docker_image: f.docker_image,
    exposed_port: intOf('Port', f.exposed_port),
    health_path: f.health_path,
    env_config: parseEnv(f.env),
    gpu_count: intOf('GPUs', f.gpu_count),
    replica_count: intOf('Replicas', f.replica_count),
    ...autoscaleBody(f, editing),
  };
}

/**
 * Create or edit a container service. The service type is chosen at creation (the API does not
 * change it). Scaling: a fixed replica_count, or autoscaling when Max replicas is set (min 0 =
 * scale to zero after the idle timeout; docs/api.md "Autoscaling").
 */
function ServiceForm({ initial, editing, busy, error, submitLabel, onSubmit }: { initial: FormState; editing: boolean; busy: boolean; error: unknown; submitLabel: string; onSubmit: (f: FormState) => void }) {
  const [f, setF] = useState(initial);
  const set = (k: keyof FormState) => (e: { currentTarget: HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement }) => setF({ ...f, [k]: e.currentTarget.value });
  const p = editing ? 'edit' : 'new';
  const deployed = f.service_type === 'deployed';
  return (
    <form
      onSubmit={(ev) => {
        ev.preventDefault();
        onSubmit(f);
      }}
    >
      <div class="field">
        <label for={`${p}-name`}>Name</label>
        <input id={`${p}-name`} required maxLength={255} value={f.display_name} onInput={set('display_name')} />
      </div>
      <div class="field">
        <label for={`${p}-slug`}>Slug</label>
        <input id={`${p}-slug`} required maxLength={63} pattern="[a-z0-9]+(-[a-z0-9]+)*" aria-describedby={`${p}-slug-help`} value={f.service_slug} onInput={set('service_slug')} />
        <small id={`${p}-slug-help`} class="help">
          Lowercase letters and digits with single hyphens; the gateway path is <code>/api/v1/r/containers/{f.service_slug || '<slug>'}/</code>.
        </small>
      </div>
      {editing ? null : (
        <div class="field">
          <label for={`${p}-type`}>Type</label>
          <select id={`${p}-type`} value={f.service_type} onChange={set('service_type')}>
            <option value="deployed">deployed: a Docker image on the team's agents</option>
            <option value="external">external: an https API reached through the gateway</option>
          </select>
        </div>
      )}
      {deployed ? (
        <>
          <div class="field">
            <label for={`${p}-image`}>Docker image</label>
            <input id={`${p}-image`} required maxLength={1000} placeholder="ghcr.io/org/server:1.2" value={f.docker_image} onInput={set('docker_image')} />
          </div>
          <div class="field">
            <label for={`${p}-port`}>Port</label>
            <input id={`${p}-port`} type="number" required min={1} max={65535} value={f.exposed_port} onInput={set('exposed_port')} />
          </div>
          <div class="field">
            <label for={`${p}-health`}>Health check path</label>
            <input id={`${p}-health`} maxLength={1000} placeholder="/health (empty: a TCP connect)" value={f.health_path} onInput={set('health_path')} />
          </div>
          <div class="field">
            <label for={`${p}-env`}>Environment</label>
            <textarea id={`${p}-env`} rows={4} aria-describedby={`${p}-env-help`} value={f.env} onInput={set('env')} />
            <small id={`${p}-env-help`} class="help">
              One <code>NAME=value</code> per line.
            </small>
          </div>
          <fieldset>
            <legend>Scaling</legend>
            <div class="field">
              <label for={`${p}-gpus`}>GPUs per replica</label>
              <input id={`${p}-gpus`} type="number" required min={-1} max={64} aria-describedby={`${p}-gpus-help`} value={f.gpu_count} onInput={set('gpu_count')} />
              <small id={`${p}-gpus-help`} class="help">
                0 for none, -1 for every GPU of the agent.
              </small>
            </div>
            <div class="field">
              <label for={`${p}-replicas`}>Replicas</label>
              <input id={`${p}-replicas`} type="number" required min={1} max={32} aria-describedby={`${p}-replicas-help`} value={f.replica_count} onInput={set('replica_count')} />
              <small id={`${p}-replicas-help`} class="help">
                The fixed size; with autoscaling (Max replicas set) the count follows the load instead.
              </small>
            </div>
            <div class="field">
              <label for={`${p}-max`}>Max replicas (autoscaling)</label>
              <input id={`${p}-max`} type="number" min={1} max={32} aria-describedby={`${p}-max-help`} value={f.max_replicas} onInput={set('max_replicas')} />
              <small id={`${p}-max-help`} class="help">
                Empty: no autoscaling. Set: replicas follow the requests in flight, between Min and Max.
              </small>
            </div>
            <div class="field">
              <label for={`${p}-min`}>Min replicas</label>
              <input id={`${p}-min`} type="number" min={0} max={32} aria-describedby={`${p}-min-help`} value={f.min_replicas} onInput={set('min_replicas')} disabled={f.max_replicas.trim() === ''} />
              <small id={`${p}-min-help`} class="help">
                0 scales to zero when idle; the next request waits for a replica to start. Empty: 1.
              </small>
            </div>
            <div class="field">
              <label for={`${p}-target`}>Target requests in flight per replica</label>
              <input id={`${p}-target`} type="number" min={1} max={10000} value={f.target_inflight} onInput={set('target_inflight')} disabled={f.max_replicas.trim() === ''} />
            </div>
            <div class="field">
              <label for={`${p}-idle`}>Idle timeout (s)</label>
              <input id={`${p}-idle`} type="number" min={1} max={604800} value={f.idle_timeout_s} onInput={set('idle_timeout_s')} disabled={f.max_replicas.trim() === ''} />
            </div>
          </fieldset>
        </>
      ) : (
        <div class="field">
          <label for={`${p}-url`}>URL (https only)</label>
          <input id={`${p}-url`} type="url" required maxLength={2048} pattern="https://.*" value={f.external_url} onInput={set('external_url')} />
        </div>
      )}
      <div class="field">
        <label for={`${p}-labels`}>Required agent labels</label>
        <input id={`${p}-labels`} aria-describedby={`${p}-labels-help`} value={f.required_labels} onInput={set('required_labels')} />
        <small id={`${p}-labels-help`} class="help">
          Comma-separated; only agents with every label run it.
        </small>
      </div>
      <div class="field">
        <label for={`${p}-desc`}>Description</label>
        <textarea id={`${p}-desc`} rows={2} maxLength={10000} value={f.service_desc} onInput={set('service_desc')} />
      </div>
      <ErrorBox error={error} />
      <button type="submit" class="primary" disabled={busy}>
        {submitLabel}
      </button>
    </form>
  );
}

export function ServicesPage() {
  const { role } = useApp();
  const admin = role === 'admin' || role === 'owner';
  const create = useAction();
  const [page, setPage] = useState(1);
  const list = useAsync((signal) => data(api.GET('/containers', { params: { query: { current_page: page, per_page: 50 } }, signal })).then((b) => ({ items: b.container_list as unknown as Service[], page_meta: b.page_meta })), [page], 5000);
  return (
    <>
      <h1>Container services</h1>
      <p>
        Services run on the team's agents (or are external https APIs) and are reached through the gateway at <code>/api/v1/r/containers/&lt;slug&gt;/…</code>.
      </p>
      {admin ? (
        <details class="card">
          <summary>
            <h2 id="new-svc">New container service</h2>
          </summary>
          <ServiceForm
            initial={EMPTY}
            editing={false}
            busy={create.busy}
            error={create.error}
            submitLabel="Create service"
            onSubmit={(f) =>
              void create.run(async () => {
                const b = bodyOf(f);
                const r = await data(api.POST('/containers', { body: { ...b, service_type: f.service_type } }));
                navigate(`/services/${r.id}`);
              })
            }
          />
        </details>
      ) : null}
      <ErrorBox error={list.error} />
      <DataTable
        rows={list.data?.items}
        rowKey={(s) => s.id}
        empty={<Notice>No container services{admin ? '' : ' (an admin of the team creates them)'}.</Notice>}
        columns={[
          { header: 'Name', cell: (s) => <a href={`/services/${s.id}`}>{s.display_name}</a> },
          { header: 'Slug', cell: (s) => <code>{s.service_slug}</code> },
          { header: 'Type', cell: (s) => s.service_type },
          { header: 'Status', cell: (s) => <Status value={s.service_status} /> },
          { header: 'Replicas', cell: (s) => (s.deploy_status ? `${s.deploy_status.healthy}/${s.deploy_status.desired} healthy` : s.replica_count) },
          { header: 'Image / URL', class: 'wrap', cell: (s) => (s.service_type === 'external' ? s.external_url : s.docker_image) },
        ]}
      />
      <Pager meta={list.data?.page_meta} page={page} onPage={setPage} />
    </>
  );
}

export function ServicePage({ id }: { id: string }) {
  const { role } = useApp();
  const admin = role === 'admin' || role === 'owner';
  const svc = useAsync((signal) => data(api.GET('/containers/{serviceId}', { params: { path: { serviceId: id } }, signal })).then((x) => x as unknown as Service), [id], 3000);
  const act = useAction();
  const save = useAction();
  const [saved, setSaved] = useState(false);
  const s = svc.data;
  if (svc.error && !s) return <ErrorBox error={svc.error} />;
  if (!s) return <p aria-busy="true">Loading…</p>;
  const op = (name: 'deploy' | 'start' | 'stop' | 'undeploy') => () => void act.run(() => api.POST(`/containers/{serviceId}/${name}`, { params: { path: { serviceId: s.id } } })).then(() => svc.reload());
  return (
    <>
      <p class="crumbs">
        <a href="/services">Services</a> / {s.service_slug}
      </p>
      <h1>
        {s.display_name} <Status value={s.service_status} />
      </h1>
      {s.service_desc ? <p>{s.service_desc}</p> : null}
      <dl class="facts">
        <dt>Gateway path</dt>
        <dd>
          <code>/api/v1/r/containers/{s.service_slug}/</code>
        </dd>
        <dt>Type</dt>
        <dd>{s.service_type}</dd>
        {s.service_type === 'external' ? (
          <>
            <dt>URL</dt>
            <dd class="wrap">{s.external_url}</dd>
          </>
        ) : (
          <>
            <dt>Image</dt>
            <dd class="wrap">
              <code>{s.docker_image}</code> port {s.exposed_port}
            </dd>
            <dt>GPUs / replicas</dt>
            <dd>
              {s.gpu_count} / {s.max_replicas != null ? `autoscaling ${s.min_replicas ?? 1}–${s.max_replicas}` : s.replica_count}
            </dd>
            {s.max_replicas != null ? (
              <>
                <dt>Autoscaling</dt>
                <dd>
                  target {s.target_inflight_per_replica ?? 8} in flight per replica, idle timeout {s.idle_timeout_s ?? 300} s
                  {s.deploy_status?.last_cold_start_ms != null ? `, last cold start ${(s.deploy_status.last_cold_start_ms / 1000).toFixed(1)} s` : ''}
                </dd>
              </>
            ) : null}
          </>
        )}
        {s.deploy_status ? (
          <>
            <dt>Deployment</dt>
            <dd>
              {s.deploy_status.running}/{s.deploy_status.desired} running, {s.deploy_status.healthy} healthy{s.deploy_status.message ? ` — ${s.deploy_status.message}` : ''}
            </dd>
          </>
        ) : null}
      </dl>
      {admin && s.service_type === 'deployed' ? (
        <p class="actions">
          <button type="button" disabled={act.busy} onClick={op('deploy')}>
            Deploy
          </button>{' '}
          <button type="button" disabled={act.busy} onClick={op('start')}>
            Start
          </button>{' '}
          <button type="button" disabled={act.busy} onClick={op('stop')}>
            Stop
          </button>{' '}
          <button type="button" class="danger" disabled={act.busy} onClick={op('undeploy')}>
            Undeploy
          </button>
        </p>
      ) : null}
      <ErrorBox error={act.error} />
      {admin ? (
        <details class="card">
          <summary>
            <h2 id="edit-svc">Edit settings</h2>
          </summary>
          <p class="help">New settings apply to replicas placed from now on; stop and deploy the service to restart every replica with them.</p>
          <ServiceForm
            key={s.id}
            initial={formOf(s)}
            editing={true}
            busy={save.busy}
            error={save.error}
            submitLabel="Save changes"
            onSubmit={(f) => {
              setSaved(false);
              void save
                .run(() => api.PUT('/containers/{serviceId}', { params: { path: { serviceId: s.id } }, body: bodyOf(f, true) }))
                .then((ok) => {
                  setSaved(ok);
                  svc.reload();
                });
            }}
          />
          {saved ? (
            <p class="success" role="status">
              Saved.
            </p>
          ) : null}
        </details>
      ) : null}
      {s.usage_prompt ? (
        <section class="card" aria-labelledby="usage-h">
          <h2 id="usage-h">Usage</h2>
          <pre class="wrap">{s.usage_prompt}</pre>
        </section>
      ) : null}
      {s.instance_list ? (
        <section class="card" aria-labelledby="inst-h">
          <h2 id="inst-h">Instances</h2>
          <DataTable
            rows={s.instance_list}
            rowKey={(i) => i.instance_id}
            empty={<p>No instances.</p>}
            columns={[
              { header: 'Instance', cell: (i) => <code>{short(i.instance_id)}</code> },
              { header: 'Agent', cell: (i) => <code>{short(i.agent_id)}</code> },
              {
                header: 'Status',
                cell: (i) => (
                  <>
                    <Status value={i.instance_status} />
                    {i.instance_error ? <small class="problem"> {i.instance_error}</small> : null}
                  </>
                ),
              },
              { header: 'Healthy', cell: (i) => (i.healthy ? 'yes' : 'no') },
              { header: 'Updated', cell: (i) => fmtTime(i.updated_at) },
            ]}
          />
        </section>
      ) : null}
    </>
  );
}
