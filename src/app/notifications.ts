/**
 * The in-app notification center's use cases (docs/api.md): a user's notifications within the
 * current team (a JWT's user, or a dk-'s underlying user), listed newest first, marked read one by
 * one or all at once.
 */
import type { TeamPrincipal } from '../identity/principal.js';
import { notificationView, type NotificationRow } from '../events/store.js';
import type { AuditNote } from '../shared/audit.js';
import { notFound } from '../shared/errors.js';
import { pageMeta, type PageRequest } from '../shared/pagination.js';

/** The notification table of the events store (src/events/store.ts EventsStore). */
export interface NotificationStore {
  listNotifications(teamId: string, userId: string, unreadOnly: boolean, limit: number, offset: number): Promise<{ rows: NotificationRow[]; total: number; unread: number }>;
  markRead(teamId: string, userId: string, id: string, now: number, audit?: AuditNote): Promise<boolean>;
  markAllRead(teamId: string, userId: string, now: number, audit?: AuditNote): Promise<number>;
}

const userOf = (p: TeamPrincipal): { teamId: string; userId: string } => {
  if (!p.userId) throw new Error('notification use case reached without a user principal');
  return { teamId: p.teamId, userId: p.userId };
};

export class NotificationUseCases {
  constructor(private readonly d: { store: NotificationStore; now: () => number }) {}

  /** `{notification_list, page_meta, unread_count}`. */
  async list(p: TeamPrincipal, page: PageRequest, unreadOnly: boolean): Promise<Record<string, unknown>> {
    const u = userOf(p);
    const r = await this.d.store.listNotifications(u.teamId, u.userId, unreadOnly, page.perPage, page.offset);
    return { notification_list: r.rows.map(notificationView), page_meta: pageMeta(page, r.total), unread_count: r.unread };
  }

  /** 404 notification_not_found for another user's or an unknown notification. */
  async markRead(p: TeamPrincipal, id: string, audit: AuditNote): Promise<{ is_success: true }> {
    const u = userOf(p);
    if (!(await this.d.store.markRead(u.teamId, u.userId, id, this.d.now(), audit))) throw notFound('notification', 'notification_not_found');
    return { is_success: true };
  }

  async markAllRead(p: TeamPrincipal, audit: AuditNote): Promise<{ is_success: true; updated_count: number }> {
    const u = userOf(p);
    const n = await this.d.store.markAllRead(u.teamId, u.userId, this.d.now(), audit);
    return { is_success: true, updated_count: n };
  }
}
