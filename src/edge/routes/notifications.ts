/**
 * The in-app notification center (docs/api.md): a user's notifications within the current team.
 * Auth: user JWT or dk- (the notifications of the underlying user), team-scoped, any role.
 *
 *   GET   /notifications                       {notification_list, page_meta, unread_count} (?unread_only=true)
 *   PATCH /notifications/{notificationId}/read {is_success}
 *   POST  /notifications/read-all              {is_success, updated_count}
 */
import type { LiveEvents } from '../../events/index.js';
import { notificationView } from '../../events/store.js';
import { invalidParameter, notFound } from '../../shared/errors.js';
import { parsePage, pageMeta } from '../../shared/pagination.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { teamPrincipalOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';
import { z } from 'zod';

const AUTH: RouteAuth = { kinds: ['user', 'device'], team: true };

const userOf = (c: Ctx): { teamId: string; userId: string } => {
  const p = teamPrincipalOf(c);
  if (!p.userId) throw new Error('notification route reached without a user principal');
  return { teamId: p.teamId, userId: p.userId };
};

export function notificationRoutes(live: LiveEvents, now: () => number): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/notifications',
      doc: { summary: 'List notifications', tags: ['notifications'], paged: true, query: z.object({ unread_only: z.enum(['true', 'false']).optional() }), responses: { 200: z.looseObject({ notification_list: z.array(D.Notification), page_meta: D.PageMeta, unread_count: z.int() }) } },
      auth: AUTH,
      handler: async (c) => {
        const pg = parsePage(c.query);
        const raw = c.query.get('unread_only');
        if (raw !== null && raw !== '' && raw !== 'true' && raw !== 'false') throw invalidParameter('unread_only: must be true or false');
        const u = userOf(c);
        const r = await live.store.listNotifications(u.teamId, u.userId, raw === 'true', pg.perPage, pg.offset);
        return { notification_list: r.rows.map(notificationView), page_meta: pageMeta(pg, r.total), unread_count: r.unread };
      },
    },
    {
      method: 'PATCH',
      path: '/notifications/{notificationId}/read',
      doc: { summary: 'Mark a notification read', tags: ['notifications'], responses: { 200: D.Success } },
      auth: AUTH,
      handler: async (c) => {
        const u = userOf(c);
        if (!(await live.store.markRead(u.teamId, u.userId, uuidParam(c, 'notificationId'), now()))) throw notFound('notification', 'notification_not_found');
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/notifications/read-all',
      doc: { summary: 'Mark every notification read', tags: ['notifications'], responses: { 200: D.Success } },
      auth: AUTH,
      handler: async (c) => {
        const u = userOf(c);
        const n = await live.store.markAllRead(u.teamId, u.userId, now());
        return { is_success: true, updated_count: n };
      },
    },
  ];
}
