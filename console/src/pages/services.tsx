/** Container services: the team's services and a service's page (instances, deploy/start/stop/undeploy). */
import { useState } from 'preact/hooks';
import { api, data, useApp } from '../session.ts';
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
  usage_prompt: string;
  required_labels: string[];
  deploy_status?: { desired: number; placed: number; running: number; healthy: number; message: string };
  instance_list?: Array<{ instance_id: string; agent_id: string; instance_status: string; healthy: boolean; instance_error: string | null; updated_at: string }>;
  updated_at: string;
}

export function ServicesPage() {
  const [page, setPage] = useState(1);
  const list = useAsync((signal) => data(api.GET('/containers', { params: { query: { current_page: page, per_page: 50 } }, signal })).then((b) => ({ items: b.container_list as unknown as Service[], page_meta: b.page_meta })), [page], 5000);
  return (
    <>
      <h1>Container services</h1>
      <p>
        Services run on the team's agents (or are external https APIs) and are reached through the gateway at <code>/api/v1/r/containers/&lt;slug&gt;/…</code>.
      </p>
      <ErrorBox error={list.error} />
      <DataTable
        rows={list.data?.items}
        rowKey={(s) => s.id}
        empty={<Notice>No container services. Create one with POST /api/v1/containers.</Notice>}
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
              {s.gpu_count} / {s.replica_count}
            </dd>
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
