import type { EventBusPort, TaskEvent } from '../actors/ports.js';

/** A listener gets each committed event and the member id of the node that published it (undefined on a single node). */
export type EventListener = (e: TaskEvent, origin?: string) => void;

/**
 * Single-node fan-out of committed task events to local subscribers (SSE streams, the webhook
 * and notification feeders). The Redis implementation (event-bus-redis.ts) also publishes them
 * across nodes and delivers other nodes' events here through deliver().
 */
export class LocalEventBus implements EventBusPort {
  private byTask = new Map<string, Set<EventListener>>();
  private all = new Set<EventListener>();
  /** This node's origin id (the Redis bus sets it; undefined on a single node). */
  origin: string | undefined = undefined;

  publish(events: readonly TaskEvent[]): void {
    for (const e of events) this.deliver(e, this.origin);
  }

  /** Delivers to local listeners (the Redis bus calls this for events from other nodes). */
  deliver(e: TaskEvent, origin?: string): void {
    for (const l of this.byTask.get(e.taskId) ?? []) safe(l, e, origin);
    for (const l of this.all) safe(l, e, origin);
  }

  /** True when an event of this origin was published by this node. */
  isLocal(origin: string | undefined): boolean {
    return origin === undefined || origin === this.origin;
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

function safe(l: EventListener, e: TaskEvent, origin: string | undefined): void {
  try {
    l(e, origin);
  } catch {
    /* a listener's failure never affects the others */
  }
}
