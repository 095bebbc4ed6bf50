/**
 * GET /r/tasks/{taskId}/events: the task's Server-Sent Events stream (docs/api.md). Runtime
 * auth (J, S, D), team-scoped (a foreign or unknown task is a 404), Last-Event-ID (header, or
 * ?last_event_id for clients that cannot set headers) replays what was missed, a per-team cap on
 * open streams answers 429 with Retry-After. The use case is src/app/task-streams.ts.
 */
import type { TaskStreamUseCases } from '../../app/task-streams.js';
import { invalidParameter } from '../../shared/errors.js';
import type { Ctx, RouteDef } from '../http.js';
import { RUNTIME } from './tasks.js';
import { teamPrincipalOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';
import { z } from 'zod';

function lastEventId(c: Ctx): number | null {
  const raw = c.headers['last-event-id'] ?? c.query.get('last_event_id') ?? '';
  const v = raw.trim();
  if (v === '') return null;
  if (!/^\d{1,18}$/.test(v)) throw invalidParameter(`Last-Event-ID: must be an event id (a non-negative integer), got ${JSON.stringify(v.slice(0, 40))}`);
  return Number(v);
}

export function eventRoutes(streams: TaskStreamUseCases): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/r/tasks/{taskId}/events',
      doc: { summary: 'Follow a task (Server-Sent Events)', description: 'One event per status change or progress tick; every message has an id: (send it back as Last-Event-ID to resume); the first message is the current status (or the terminal event, then the stream closes). EventSource cannot send Authorization: use fetch streaming.', tags: ['runtime', 'tasks'], headers: { 'Last-Event-ID': 'resume after this event id (also ?last_event_id=)' }, query: z.object({ last_event_id: z.string().optional() }), responses: { 200: { description: 'The event stream', sse: D.TASK_EVENTS } }, errors: [429] },
      auth: RUNTIME,
      tag: 'sse',
      stream: async (c, res) => {
        const since = Date.now();
        const taskId = uuidParam(c, 'taskId');
        await streams.follow(teamPrincipalOf(c), taskId, lastEventId(c), res, since);
      },
    },
  ];
}
