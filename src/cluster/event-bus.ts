import type { EventBusPort, TaskEvent } from '../actors/ports.js';

export type EventListener = (e: TaskEvent) => void;

/**
 * Single-node fan-out of committed task events to local subscribers (SSE streams, the webhook
 * and notification feeders). The Redis implementation publishes the same events across nodes.
 */
export class LocalEventBus implements EventBusPort {
  private byTask = new Map<string, Set<EventListener>>();
  private all = new Set<EventListener>();

  publish(events: readonly TaskEvent[]): void {
    for (const e of events) this.deliver(e);
  }

  /** Delivers to local listeners (the Redis bus calls this for events from other nodes). */
  deliver(e: TaskEvent): void {
    for (const l of this.byTask.get(e.taskId) ?? []) safe(l, e);
    for (const l of this.all) safe(l, e);
  }

  subscribeTask(taskId: string, l: EventListener): () => void {
    let s = this.byTask.get(taskId);
    if (!s) this.byTask.set(taskId, (s = new Set()));
    s.add(l);
    return () => {
      s.delete(l);
      if (s.size === 0) this.byTask.delete(taskId);
    };
  }

  subscribeAll(l: EventListener): () => void {
    this.all.add(l);
    return () => this.all.delete(l);
  }
}

function safe(l: EventListener, e: TaskEvent): void {
  try {
    l(e);
  } catch {
    /* a listener's failure never affects the others */
  }
}
