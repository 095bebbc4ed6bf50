/** Members of the current team and its invitations. */
import { useState } from 'preact/hooks';
import { api, data, useApp } from '../session.ts';
import { DataTable, ErrorBox, fmtTime, Pager, Status, useAction, useAsync } from '../ui.tsx';

interface Member {
  user_id: string;
  display_name: string;
  email_address: string;
  member_role: string;
  joined_at: string;
}

interface Invitation {
  id: string;
  email_address: string;
  member_role: string;
  invitation_status: string;
  created_at: string;
  expires_at: string;
}

export function MembersPage() {
  const { role, me } = useApp();
  const admin = role === 'admin' || role === 'owner';
  const [memberPage, setMemberPage] = useState(1);
  const [invitationPage, setInvitationPage] = useState(1);
  const members = useAsync((signal) => data(api.GET('/teams/current/members', { params: { query: { current_page: memberPage, per_page: 50 } }, signal })).then((b) => ({ items: b.member_list as unknown as Member[], page_meta: b.page_meta })), [memberPage]);
  const invitations = useAsync(
    (signal) => (admin ? data(api.GET('/teams/current/invitations', { params: { query: { current_page: invitationPage, per_page: 50 } }, signal })).then((b) => ({ items: b.invitation_list as unknown as Invitation[], page_meta: b.page_meta })) : Promise.resolve(null)),
    [admin, invitationPage],
  );
  const [f, setF] = useState({ email_address: '', member_role: 'member' });
  const act = useAction();
  const invite = (ev: Event): void => {
    ev.preventDefault();
    void act.run(() => api.POST('/teams/current/invitations', { body: { email_address: f.email_address, member_role: f.member_role as 'admin' | 'member' } })).then((ok) => {
      if (!ok) return;
      setF({ ...f, email_address: '' });
      invitations.reload();
    });
  };
  return (
    <>
      <h1>Members</h1>
      <ErrorBox error={members.error ?? act.error} />
      <DataTable
        rows={members.data?.items}
        rowKey={(m) => m.user_id}
        columns={[
          { header: 'Name', cell: (m) => m.display_name },
          { header: 'Email', cell: (m) => m.email_address },
          {
            header: 'Role',
            cell: (m) =>
              admin && m.member_role !== 'owner' && m.user_id !== me.id ? (
                <select aria-label={`Role of ${m.display_name}`} value={m.member_role} onChange={(e) => void act.run(() => api.PUT('/teams/current/members/{userId}', { params: { path: { userId: m.user_id } }, body: { member_role: e.currentTarget.value as 'admin' | 'member' } })).then(() => members.reload())}>
                  <option value="admin">admin</option>
                  <option value="member">member</option>
                </select>
              ) : (
                m.member_role
              ),
          },
          { header: 'Joined', cell: (m) => fmtTime(m.joined_at) },
          {
            header: 'Actions',
            srOnly: true,
            cell: (m) =>
              m.member_role !== 'owner' && (admin || m.user_id === me.id) ? (
                <button
                  type="button"
                  class="danger"
                  onClick={() => {
                    if (!confirm(m.user_id === me.id ? 'Leave this team?' : `Remove ${m.display_name} from the team?`)) return;
                    void act.run(() => api.DELETE('/teams/current/members/{userId}', { params: { path: { userId: m.user_id } } })).then(() => members.reload());
                  }}
                >
                  {m.user_id === me.id ? 'Leave' : 'Remove'}
                </button>
              ) : null,
          },
        ]}
      />
      <Pager meta={members.data?.page_meta} page={memberPage} onPage={setMemberPage} />
      {admin ? (
        <section class="card" aria-labelledby="invite-h">
          <h2 id="invite-h">Invitations</h2>
          <form onSubmit={invite} class="inline">
            <div class="field">
              <label for="invite-email">Email address</label>
              <input id="invite-email" type="email" required value={f.email_address} onInput={(e) => setF({ ...f, email_address: e.currentTarget.value })} />
            </div>
            <div class="field">
              <label for="invite-role">Role</label>
              <select id="invite-role" value={f.member_role} onChange={(e) => setF({ ...f, member_role: e.currentTarget.value })}>
                <option value="member">member</option>
                <option value="admin">admin</option>
              </select>
            </div>
            <button type="submit" class="primary" disabled={act.busy}>
              Invite
            </button>
          </form>
          <ErrorBox error={invitations.error} />
          <DataTable
            rows={invitations.data?.items ?? []}
            rowKey={(i) => i.id}
            empty={<p>No open invitations.</p>}
            columns={[
              { header: 'Email', cell: (i) => i.email_address },
              { header: 'Role', cell: (i) => i.member_role },
              { header: 'Status', cell: (i) => <Status value={i.invitation_status} /> },
              { header: 'Expires', cell: (i) => fmtTime(i.expires_at) },
              {
                header: 'Actions',
                srOnly: true,
                cell: (i) =>
                  i.invitation_status === 'pending' ? (
                    <button type="button" class="danger" aria-label={`Revoke the invitation of ${i.email_address}`} onClick={() => void act.run(() => api.DELETE('/teams/current/invitations/{invitationId}', { params: { path: { invitationId: i.id } } })).then(() => invitations.reload())}>
                      Revoke
                    </button>
                  ) : null,
              },
            ]}
          />
          <Pager meta={invitations.data?.page_meta} page={invitationPage} onPage={setInvitationPage} />
        </section>
      ) : null}
    </>
  );
}
