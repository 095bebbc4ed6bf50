import { Migration } from '@mikro-orm/migrations';

/**
 * Tracing: the W3C traceparent of the span that submitted the task (null when tracing is off), so
 * the spans made after the 202 (scheduling, the agent's run, completion) join the submit's trace.
 * A retry task copies its parent's. Expand-only (a nullable column): a node of the previous
 * version neither reads nor writes it, so old and new nodes run side by side.
 */
export class Migration20261125000300_task_trace extends Migration {
  override up(): void {
    this.addSql('alter table tasks add column if not exists trace_parent text;');
  }

  override down(): void {
    this.addSql('alter table tasks drop column if exists trace_parent;');
  }
}
