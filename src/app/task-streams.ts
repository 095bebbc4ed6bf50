/**
 * Following a task (GET /r/tasks/{taskId}/events): a Server-Sent Events stream of the caller's
 * team's task, resumed after the last event id the client saw, within the team's cap on open
 * streams. The stream ends when what let it open is invalidated (its holder; see
 * src/events/stream-revocation.ts). The hub that replays and follows is src/events/sse.ts.
 */
import type { TeamPrincipal } from '../identity/principal.js';
import type { SseSink, StreamHolder } from '../events/sse.js';
import { notFound, rateLimited } from '../shared/errors.js';

/** The SSE hub (src/events/sse.ts SseHub), seen through a slot that is either held or refused. */
export interface TaskStreamHub {
  /** One of the team's open-stream slots: `release` frees it; `refused` (why) when the cap is reached. */
  reserve(teamId: string): { release: () => void } | { refused: string };
  serve(teamId: string, taskId: string, lastEventId: number | null, res: SseSink, release: () => void, holder?: StreamHolder): Promise<'not_found' | 'served'>;
}

export class TaskStreamUseCases {
  constructor(private readonly hub: TaskStreamHub) {}

  /**
   * Streams the task's events to `sink` after `lastEventId` (null: from the current status); 429
   * (Retry-After 5) over the team's cap, 404 task_not_found for a foreign or unknown task.
   * `since`: when the request was authenticated.
   */
  async follow(p: TeamPrincipal, taskId: string, lastEventId: number | null, sink: SseSink, since: number): Promise<void> {
    const slot = this.hub.reserve(p.teamId);
    if ('refused' in slot) throw rateLimited(5, slot.refused);
    const r = await this.hub.serve(p.teamId, taskId, lastEventId, sink, slot.release, { kind: p.kind, userId: p.userId, credentialId: p.credentialId, sessionId: p.sessionId, since });
    if (r === 'not_found') throw notFound('task', 'task_not_found');
  }
}
