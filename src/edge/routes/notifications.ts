/**
 * The in-app notification center (docs/api.md): a user's notifications within the current team.
 * Auth: user JWT or dk- (the notifications of the underlying user), team-scoped, any role.
 *
 *   GET   /notifications                       {notification_list, page_meta, unread_count} (?unread_only=true)
 *   PATCH /notifications/{notificationId}/read {is_success}
 *   POST  /notifications/read-all              {is_success, updated_count}
 *
 * The use cases are src/app/notifications.ts.
 */
import type { NotificationUseCases } from '../../app/notifications.js';
import { invalidParameter } from '../../shared/errors.js';
import { parsePage } from '../../shared/pagination.js';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, teamPrincipalOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';
import { z } from 'zod';

const AUTH: RouteAuth = { kinds: ['user', 'device'], team: true };

export function notificationRoutes(notes: NotificationUseCases): RouteDef[] {
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
        return notes.list(teamPrincipalOf(c), pg, raw === 'true');
      },
    },
    {
      method: 'PATCH',
      path: '/notifications/{notificationId}/read',
      doc: { summary: 'Mark a notification read', tags: ['notifications'], responses: { 200: D.Success } },
      auth: AUTH,
      handler: async (c) => {
        const id = uuidParam(c, 'notificationId');
        return notes.markRead(teamPrincipalOf(c), id, auditOf(c, 'notification.read', 'notification', id));
      },
    },
    {
      method: 'POST',
      path: '/notifications/read-all',
      doc: { summary: 'Mark every notification read', tags: ['notifications'], responses: { 200: D.Success } },
      auth: AUTH,
      handler: async (c) => notes.markAllRead(teamPrincipalOf(c), auditOf(c, 'notification.read_all', 'notification')),
    },
  ];
}
