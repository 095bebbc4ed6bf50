/** The user's notifications in the current team: list (refreshed), mark read, mark all read. */
import { useState } from 'preact/hooks';
import { api, data } from '../session.ts';
import { ErrorBox, fmtTime, Notice, Pager, useAction, useAsync } from '../ui.tsx';

interface Notification {
  id: string;
  notification_kind: string;
  title: string;
  message: string;
  task_id: string | null;
  agent_id: string | null;
  webhook_id: string | null;
  is_read: boolean;
  created_at: string;
}

export function NotificationsPage() {
  const [page, setPage] = useState(1);
  const [unreadOnly, setUnreadOnly] = useState(false);
  const list = useAsync(
    async (signal) => {
      const b = await data(api.GET('/notifications', { params: { query: { current_page: page, per_page: 20, ...(unreadOnly ? { unread_only: 'true' as const } : {}) } }, signal }));
      return { ...b, notification_list: b.notification_list as unknown as Notification[] };
    },
    [page, unreadOnly],
    5000,
  );
  const act = useAction();
  const items = list.data?.notification_list ?? [];
  return (
    <>
      <h1>Notifications</h1>
      <p class="actions">
        <label class="check">
          <input type="checkbox" checked={unreadOnly} onChange={(e) => (setUnreadOnly(e.currentTarget.checked), setPage(1))} /> Unread only
        </label>{' '}
        <span role="status">{list.data ? `${list.data.unread_count} unread` : ''}</span>{' '}
        <button type="button" disabled={act.busy || !list.data?.unread_count} onClick={() => void act.run(() => api.POST('/notifications/read-all')).then(() => list.reload())}>
          Mark all read
        </button>
      </p>
      <ErrorBox error={list.error ?? act.error} />
      {list.data && items.length === 0 ? <Notice>No notifications.</Notice> : null}
      <ul class="notifications">
        {items.map((n) => (
          <li key={n.id} class={n.is_read ? 'read' : 'unread'}>
            <p>
              <strong>{n.title}</strong> <small>{fmtTime(n.created_at)}</small>
            </p>
            <p>{n.message}</p>
            <p class="actions">
              {n.task_id ? <a href={`/tasks/${n.task_id}`}>Open task</a> : null} {n.webhook_id ? <a href={`/webhooks/${n.webhook_id}`}>Open webhook</a> : null}{' '}
              {!n.is_read ? (
                <button type="button" disabled={act.busy} aria-label={`Mark "${n.title}" read`} onClick={() => void act.run(() => api.PATCH('/notifications/{notificationId}/read', { params: { path: { notificationId: n.id } } })).then(() => list.reload())}>
                  Mark read
                </button>
              ) : null}
            </p>
          </li>
        ))}
      </ul>
      <Pager meta={list.data?.page_meta} page={page} onPage={setPage} />
    </>
  );
}
