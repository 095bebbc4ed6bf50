/**
 * The SSE read side over task_events: whether a task of the team exists, its events after an id
 * (replay), and its current transition and progress. Team-scoped like every events query.
 */
import type { TaskEvent } from '../actors/ports.js';
import type { Database } from '../persistence/db.js';
import { q } from '../persistence/sql.js';
import { rowToEvent, type TaskEventRow } from '../persistence/task-rows.js';
import type { SseTaskSource } from './sse.js';

export class TaskEventSource implements SseTaskSource {
  constructor(private readonly db: Database) {}

  async exists(teamId: string, taskId: string): Promise<boolean> {
    return (await q(this.db)('select 1 as ok from tasks where team_id = ? and id = ?', [teamId, taskId])).length > 0;
  }

  async eventsAfter(teamId: string, taskId: string, afterId: number, limit: number): Promise<TaskEvent[]> {
    const rows = await q(this.db)<TaskEventRow>('select * from task_events where task_id = ? and team_id = ? and id > ? order by id limit ?', [taskId, teamId, afterId, limit]);
    return rows.map(rowToEvent);
  }

  async current(teamId: string, taskId: string): Promise<{ transition: TaskEvent | null; progress: TaskEvent | null }> {
    const rows = await q(this.db)<TaskEventRow>(
      `(select * from task_events where task_id = ? and team_id = ? and event_type <> 'progress' order by id desc limit 1)
       union all
       (select * from task_events where task_id = ? and team_id = ? and event_type = 'progress' order by id desc limit 1)`,
      [taskId, teamId, taskId, teamId],
    );
    const transition = rows.find((r) => r.event_type !== 'progress');
    const progress = rows.find((r) => r.event_type === 'progress');
    const t = transition ? rowToEvent(transition) : null;
    const p = progress ? rowToEvent(progress) : null;
    // a progress tick older than the current status is history, not news
    return { transition: t, progress: p && t && p.id > t.id && t.type === 'status' && (t.data as { status?: string }).status === 'running' ? p : null };
  }
}
