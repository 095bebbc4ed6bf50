/** Webhooks: create, enable/disable, delete; a webhook's page with its signing secret, delivery log and redeliver. */
import { useState } from 'preact/hooks';
import { api, data } from '../session.ts';
import { navigate } from '../router.ts';
import { DataTable, ErrorBox, fmtTime, Notice, Pager, short, Status, useAction, useAsync } from '../ui.tsx';

interface Webhook {
  id: string;
  display_name: string;
  webhook_url: string;
  webhook_events: string[];
  webhook_status: string;
  signing_secret?: string;
  created_at: string;
}

interface Delivery {
  id: string;
  task_id: string;
  event_type: string;
  delivery_status: string;
  attempt: number;
  max_attempts: number;
  response_code: number | null;
  latency_ms: number | null;
  error: string | null;
  created_at: string;
}

const EVENTS = ['task.completed', 'task.failed'];

export function WebhooksPage() {
  const [page, setPage] = useState(1);
  const list = useAsync((signal) => data(api.GET('/webhooks', { params: { query: { current_page: page, per_page: 50 } }, signal })).then((b) => ({ items: b.webhook_list as unknown as Webhook[], page_meta: b.page_meta })), [page]);
  const [f, setF] = useState({ display_name: '', webhook_url: 'https://', events: new Set(EVENTS) });
  const create = useAction();
  const toggle = useAction();
  const submit = (ev: Event): void => {
    ev.preventDefault();
    void create.run(async () => {
      const r = await data(api.POST('/webhooks', { body: { display_name: f.display_name, webhook_url: f.webhook_url, webhook_events: [...f.events] as Array<'task.completed' | 'task.failed'> } }));
      navigate(`/webhooks/${r.id}`);
    });
  };
  return (
    <>
      <h1>Webhooks</h1>
      <section class="card" aria-labelledby="new-hook">
        <h2 id="new-hook">New webhook</h2>
        <form onSubmit={submit}>
          <div class="field">
            <label for="hook-name">Name</label>
            <input id="hook-name" required maxLength={255} value={f.display_name} onInput={(e) => setF({ ...f, display_name: e.currentTarget.value })} />
          </div>
          <div class="field">
            <label for="hook-url">URL (https only)</label>
            <input id="hook-url" type="url" required maxLength={2048} pattern="https://.*" value={f.webhook_url} onInput={(e) => setF({ ...f, webhook_url: e.currentTarget.value })} />
          </div>
          <fieldset>
            <legend>Events</legend>
            {EVENTS.map((e) => (
              <label key={e} class="check">
                <input
                  type="checkbox"
                  checked={f.events.has(e)}
                  onChange={(ev) => {
                    const s = new Set(f.events);
                    if (ev.currentTarget.checked) s.add(e);
                    else s.delete(e);
                    setF({ ...f, events: s });
                  }}
                />{' '}
                {e}
              </label>
            ))}
          </fieldset>
          <ErrorBox error={create.error} />
          <button type="submit" class="primary" disabled={create.busy || f.events.size === 0}>
            Create webhook
          </button>
        </form>
      </section>
      <ErrorBox error={list.error ?? toggle.error} />
      <DataTable
        rows={list.data?.items}
        rowKey={(w) => w.id}
        empty={<Notice>No webhooks.</Notice>}
        columns={[
          { header: 'Name', cell: (w) => <a href={`/webhooks/${w.id}`}>{w.display_name}</a> },
          { header: 'URL', class: 'wrap', cell: (w) => w.webhook_url },
          { header: 'Events', cell: (w) => w.webhook_events.join(', ') },
          { header: 'Status', cell: (w) => <Status value={w.webhook_status} /> },
          {
            header: 'Actions',
            srOnly: true,
            cell: (w) => (
              <button
                type="button"
                disabled={toggle.busy}
                aria-label={`${w.webhook_status === 'active' ? 'Disable' : 'Enable'} ${w.display_name}`}
                onClick={() => void toggle.run(() => api.PUT('/webhooks/{webhookId}', { params: { path: { webhookId: w.id } }, body: { webhook_status: w.webhook_status === 'active' ? 'disabled' : 'active' } })).then(() => list.reload())}
              >
                {w.webhook_status === 'active' ? 'Disable' : 'Enable'}
              </button>
            ),
          },
        ]}
      />
      <Pager meta={list.data?.page_meta} page={page} onPage={setPage} />
    </>
  );
}

export function WebhookPage({ id }: { id: string }) {
  const hook = useAsync((signal) => data(api.GET('/webhooks/{webhookId}', { params: { path: { webhookId: id } }, signal })).then((x) => x as unknown as Webhook), [id]);
  const [page, setPage] = useState(1);
  const deliveries = useAsync((signal) => data(api.GET('/webhooks/{webhookId}/deliveries', { params: { path: { webhookId: id }, query: { current_page: page, per_page: 20 } }, signal })).then((b) => ({ items: b.delivery_list as unknown as Delivery[], page_meta: b.page_meta })), [id, page], 5000);
  const act = useAction();
  const [showSecret, setShowSecret] = useState(false);
  const w = hook.data;
  if (hook.error) return <ErrorBox error={hook.error} />;
  if (!w) return <p aria-busy="true">Loading…</p>;
  return (
    <>
      <p class="crumbs">
        <a href="/webhooks">Webhooks</a> / {w.display_name}
      </p>
      <h1>
        {w.display_name} <Status value={w.webhook_status} />
      </h1>
      <dl class="facts">
        <dt>URL</dt>
        <dd class="wrap">{w.webhook_url}</dd>
        <dt>Events</dt>
        <dd>{w.webhook_events.join(', ')}</dd>
        <dt>Signing secret</dt>
        <dd>
          {w.signing_secret ? (
            <>
              <code>{showSecret ? w.signing_secret : '••••••••••••'}</code>{' '}
              <button type="button" onClick={() => setShowSecret(!showSecret)} aria-pressed={showSecret}>
                {showSecret ? 'Hide' : 'Show'}
              </button>
            </>
          ) : (
            'visible to admins'
          )}
        </dd>
      </dl>
      <p class="actions">
        <button type="button" disabled={act.busy} onClick={() => void act.run(() => api.PUT('/webhooks/{webhookId}', { params: { path: { webhookId: w.id } }, body: { webhook_status: w.webhook_status === 'active' ? 'disabled' : 'active' } })).then(() => hook.reload())}>
          {w.webhook_status === 'active' ? 'Disable' : 'Enable'}
        </button>{' '}
        <button
          type="button"
          class="danger"
          disabled={act.busy}
          onClick={() => {
            if (!confirm(`Delete ${w.display_name} and its delivery log?`)) return;
            void act.run(() => api.DELETE('/webhooks/{webhookId}', { params: { path: { webhookId: w.id } } })).then((ok) => ok && navigate('/webhooks'));
          }}
        >
          Delete
        </button>
      </p>
      <ErrorBox error={act.error} />
      <section class="card" aria-labelledby="deliveries-h">
        <h2 id="deliveries-h">Delivery log</h2>
        <ErrorBox error={deliveries.error} />
        <DataTable
          rows={deliveries.data?.items}
          rowKey={(d) => d.id}
          empty={<p>No deliveries yet.</p>}
          columns={[
            { header: 'When', cell: (d) => fmtTime(d.created_at) },
            { header: 'Event', cell: (d) => d.event_type },
            { header: 'Task', cell: (d) => <a href={`/tasks/${d.task_id}`}>{short(d.task_id)}</a> },
            { header: 'Status', cell: (d) => <Status value={d.delivery_status} /> },
            { header: 'Attempt', cell: (d) => `${d.attempt}/${d.max_attempts}` },
            {
              header: 'Response',
              cell: (d) => (
                <>
                  {d.response_code ?? '—'}
                  {d.latency_ms !== null ? ` in ${d.latency_ms} ms` : ''}
                  {d.error ? <small class="problem"> {d.error}</small> : null}
                </>
              ),
            },
            {
              header: 'Actions',
              srOnly: true,
              cell: (d) => (
                <button type="button" disabled={act.busy || w.webhook_status !== 'active'} onClick={() => void act.run(() => api.POST('/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver', { params: { path: { webhookId: w.id, deliveryId: d.id } } })).then(() => deliveries.reload())}>
                  Redeliver
                </button>
              ),
            },
          ]}
        />
        <Pager meta={deliveries.data?.page_meta} page={page} onPage={setPage} />
      </section>
    </>
  );
}
