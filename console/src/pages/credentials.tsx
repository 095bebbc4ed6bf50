/** Credentials: create an sk- (integration) or ak- (agent) with its value shown once, list, revoke. */
import { useState } from 'preact/hooks';
import { api, data, useApp } from '../session.ts';
import { DataTable, ErrorBox, fmtTime, Notice, Pager, useAction, useAsync } from '../ui.tsx';

interface Credential {
  id: string;
  credential_type: string;
  display_name: string;
  credential_prefix: string;
  creator_name: string;
  created_at: string;
  expires_at: string | null;
  last_used_at: string | null;
}

export function CredentialsPage() {
  const { role } = useApp();
  const [page, setPage] = useState(1);
  const list = useAsync((signal) => data(api.GET('/credentials', { params: { query: { current_page: page, per_page: 50 } }, signal })).then((b) => ({ items: b.credential_list as unknown as Credential[], page_meta: b.page_meta })), [page]);
  const [f, setF] = useState({ credential_type: 'integration', display_name: '', expires_in_days: '' });
  const [created, setCreated] = useState<{ value: string; name: string } | null>(null);
  const create = useAction();
  const revoke = useAction();
  const submit = (ev: Event): void => {
    ev.preventDefault();
    void create.run(async () => {
      const r = await data(
        api.POST('/credentials', { body: { credential_type: f.credential_type as 'integration' | 'agent', display_name: f.display_name, ...(f.expires_in_days ? { expires_in_days: Number(f.expires_in_days) } : {}) } }),
      );
      setCreated({ value: r.credential_value, name: f.display_name });
      setF({ ...f, display_name: '' });
      list.reload();
    });
  };
  return (
    <>
      <h1>Credentials</h1>
      <section class="card" aria-labelledby="new-cred">
        <h2 id="new-cred">New credential</h2>
        <form onSubmit={submit} class="inline">
          <div class="field">
            <label for="cred-type">Type</label>
            <select id="cred-type" value={f.credential_type} onChange={(e) => setF({ ...f, credential_type: e.currentTarget.value })}>
              <option value="integration">integration (sk-): runtime API and MCP</option>
              <option value="agent" disabled={role === 'member'}>
                agent (ak-): connects a GPU agent{role === 'member' ? ' (admins only)' : ''}
              </option>
            </select>
          </div>
          <div class="field">
            <label for="cred-name">Name (visible to the team)</label>
            <input id="cred-name" required maxLength={255} value={f.display_name} onInput={(e) => setF({ ...f, display_name: e.currentTarget.value })} />
          </div>
          <div class="field">
            <label for="cred-expiry">Expires in days (1-365, blank: never)</label>
            <input id="cred-expiry" type="number" min={1} max={365} step={1} value={f.expires_in_days} onInput={(e) => setF({ ...f, expires_in_days: e.currentTarget.value })} />
          </div>
          <button type="submit" class="primary" disabled={create.busy}>
            Create credential
          </button>
        </form>
        <ErrorBox error={create.error} />
        {created ? (
          <div class="secret" role="status">
            <p>
              <strong>{created.name}</strong>: copy this value now. It is shown only once.
            </p>
            <label for="cred-value">Credential value</label>
            <input id="cred-value" readOnly value={created.value} onFocus={(e) => e.currentTarget.select()} data-testid="credential-value" />
            <button type="button" onClick={() => void navigator.clipboard?.writeText(created.value).catch(() => undefined)}>
              Copy
            </button>
            <button type="button" onClick={() => setCreated(null)}>
              Done
            </button>
          </div>
        ) : null}
      </section>
      <ErrorBox error={list.error ?? revoke.error} />
      <DataTable
        rows={list.data?.items}
        rowKey={(c) => c.id}
        rowAttrs={(c) => ({ 'data-credential': c.display_name })}
        empty={<Notice>No credentials.</Notice>}
        columns={[
          { header: 'Name', cell: (c) => c.display_name },
          { header: 'Type', cell: (c) => c.credential_type },
          { header: 'Prefix', cell: (c) => <code>{c.credential_prefix}…</code> },
          { header: 'Created by', cell: (c) => c.creator_name },
          { header: 'Expires', cell: (c) => (c.expires_at ? fmtTime(c.expires_at) : 'never') },
          { header: 'Last used', cell: (c) => fmtTime(c.last_used_at) },
          {
            header: 'Actions',
            srOnly: true,
            cell: (c) => (
              <button
                type="button"
                class="danger"
                disabled={revoke.busy}
                aria-label={`Revoke ${c.display_name}`}
                onClick={() => {
                  if (!confirm(`Revoke ${c.display_name}? Requests with it fail from now on.`)) return;
                  void revoke.run(() => api.DELETE('/credentials/{credentialId}', { params: { path: { credentialId: c.id } } })).then(() => list.reload());
                }}
              >
                Revoke
              </button>
            ),
          },
        ]}
      />
      <Pager meta={list.data?.page_meta} page={page} onPage={setPage} />
    </>
  );
}
