/**
 * The task event stream (GET /r/tasks/{taskId}/events), docs/api.md.
 *
 * Gap-free by construction: the stream subscribes to the bus BEFORE it reads PostgreSQL, buffers
 * what the bus delivers meanwhile, then sends the replay (or the current status) followed by the
 * buffered and live events, skipping every id it already sent (ids are task_events.id, so they
 * increase per task). Each message is `id:`, `event:`, `data:`; the stream closes after a terminal
 * event. A slow reader never makes the server buffer without bound: while the socket is not
 * writable, queued progress ticks are coalesced into the newest one (transitions are never dropped)
 * and a client whose uWS buffer exceeds maxBufferedBytes is disconnected.
 */
import type { TaskEvent } from '../actors/ports.js';
import type { Logger } from '../shared/logger.js';

/**
 * What a stream needs of the HTTP response it writes to (the edge's StreamResponse implements it;
 * events does not import the edge).
 */
export interface SseSink {
  readonly aborted: boolean;
  readonly ended: boolean;
  onAbort(h: () => void): void;
  writeHead(status: number, headers?: Record<string, string>): void;
  /** False under backpressure: wait for drained() before the next write. */
  write(chunk: string): boolean;
  drained(): Promise<void>;
  /** Bytes held for this socket beyond what the kernel took. */
  bufferedAmount(): number;
  end(): void;
  /** Closes the connection abruptly. */
  close(): void;
}

export const TERMINAL_EVENTS: ReadonlySet<string> = new Set(['completed', 'failed', 'cancelled']);

export interface SseTaskSource {
  /** Null when the task does not exist in this team. */
  exists(teamId: string, taskId: string): Promise<boolean>;
  /** Events after an id, oldest first (up to limit). */
  eventsAfter(teamId: string, taskId: string, afterId: number, limit: number): Promise<TaskEvent[]>;
  /** The newest non-progress event (the current status or the terminal event) and the newest progress after it. */
  current(teamId: string, taskId: string): Promise<{ transition: TaskEvent | null; progress: TaskEvent | null }>;
}

export interface SseBus {
  /** origin: the node that published the event (cluster), undefined on a single node. */
  subscribeTask(taskId: string, l: (e: TaskEvent, origin?: string) => void): () => void;
}

export interface SseHubOptions {
  source: SseTaskSource;
  bus: SseBus;
  logger: Logger;
  maxStreamsPerTeam: number;
  keepAliveMs: number;
  /** A reader whose unsent bytes exceed this is dropped (default 1 MiB). */
  maxBufferedBytes?: number;
}

export class TooManyStreams extends Error {}

/**
 * Who opened a stream (from the request's principal): a stream ends when what let it open is
 * invalidated (its credential revoked, its login session ended, its user's membership or team gone);
 * see stream-revocation.ts.
 */
export interface StreamHolder {
  kind: string;
  userId?: string | undefined;
  credentialId?: string | undefined;
  sessionId?: string | undefined;
  /** When its request was authenticated (ms): an invalidation at or after it, while the stream was still opening, ends it. */
  since: number;
}

/** Matches the streams an invalidation ends (team: the stream's team). */
export type StreamMatch = (teamId: string, holder: StreamHolder) => boolean;

/** How long an invalidation is remembered for streams still opening (authenticated before it, registered after). */
const RECENT_END_MS = 30_000;

export const formatEvent = (e: { id: number; type: string; data: unknown }): string => `id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(e.data)}\n\n`;

/**
 * One open stream.
 *
 * Cluster: pub/sub may lose an event (its node died between commit and publish, a subscriber
 * reconnected). A stream then "syncs": it holds live events back, reads everything after the last
 * event it queued from PostgreSQL (the truth; a published event is already committed), sends that in
 * order, then lets the held events through (ids already sent are skipped). It syncs when the hub says
 * events may have been lost (resync(): a membership change, a sequence gap, a reconnect) and when an
 * event arrives from another origin than the previous one (the task's writer moved to another node:
 * the old one may have died with an event unpublished). On a single node the origin never changes
 * and nothing is ever re-read.
 */
class SseStream {
  lastSentId = 0;
  private queue: TaskEvent[] = [];
  private writing = false;
  private closed = false;
  private live = false;
  // allocated when used: events that arrive during the replay, and during a sync
  private pending: TaskEvent[] | null = null;
  private lastOrigin: string | undefined = undefined;
  private needsSync = false;
  private syncing = false;
  private held: TaskEvent[] | null = null;
  holder: StreamHolder = UNKNOWN_HOLDER;
  /** The bus subscription and the team's stream slot, given back once (cleanup). */
  unsub: (() => void) | null = null;
  release: (() => void) | null = null;

  constructor(
    readonly teamId: string,
    readonly taskId: string,
    private readonly res: SseSink,
    private readonly maxBuffered: number,
    private readonly owner: StreamOwner,
  ) {
    res.onAbort(() => this.finish());
  }

  /** Unsubscribes and frees the slot (idempotent). */
  cleanup(): void {
    const { unsub, release } = this;
    this.unsub = null;
    this.release = null;
    unsub?.();
    release?.();
  }

  /** The newest id sent or queued. */
  private highWater(): number {
    return Math.max(this.lastSentId, this.queue[this.queue.length - 1]?.id ?? 0);
  }

  /** Events may have been lost: re-read PostgreSQL before the next live event goes out (and now). */
  resync(): void {
    if (this.isClosed) return;
    this.needsSync = true;
    if (this.live) void this.sync();
  }

  private async sync(): Promise<void> {
    if (this.syncing || this.isClosed) return;
    this.syncing = true;
    try {
      while (this.needsSync && !this.isClosed) {
        this.needsSync = false;
        let after = this.highWater();
        for (;;) {
          const page = await this.owner._readAfter(this, after);
          for (const e of page) this.enqueue(e);
          if (page.length < 500) break;
          after = page[page.length - 1]?.id ?? after;
        }
      }
    } catch (err) {
      this.owner._syncError(this, err);
    } finally {
      this.syncing = false;
      const held = this.held;
      this.held = null;
      if (held) for (const e of held.sort((a, b) => a.id - b.id)) this.enqueue(e);
    }
  }

  get isClosed(): boolean {
    return this.closed || this.res.aborted || this.res.ended;
  }

  /** From the bus: buffered until the replay is done, then queued for sending (after a sync when one is due). */
  onBus(e: TaskEvent, origin?: string): void {
    if (this.isClosed) return;
    if (origin !== undefined) {
      if (this.lastOrigin !== undefined && origin !== this.lastOrigin) this.needsSync = true;
      this.lastOrigin = origin;
    }
    if (!this.live) (this.pending ??= []).push(e);
    else if (this.needsSync || this.syncing) {
      (this.held ??= []).push(e);
      void this.sync();
    } else this.enqueue(e);
  }

  /** Replay done: flush what the bus delivered meanwhile (ids already sent are skipped). */
  goLive(): void {
    this.live = true;
    const buffered = this.pending ? this.pending.sort((a, b) => a.id - b.id) : [];
    this.pending = null;
    if (this.needsSync) {
      (this.held ??= []).push(...buffered);
      void this.sync();
      return;
    }
    for (const e of buffered) this.enqueue(e);
  }

  enqueue(e: TaskEvent): void {
    if (this.isClosed || e.id <= this.lastSentId) return;
    const last = this.queue[this.queue.length - 1];
    if (e.id <= (last?.id ?? 0)) return;
    // coalesce: a progress tick replaces a queued progress tick that has not been sent yet
    if (e.type === 'progress' && last?.type === 'progress') this.queue[this.queue.length - 1] = e;
    else this.queue.push(e);
    this.pump();
  }

  /** Sends one message now (replay, first status): the caller awaits drain itself. */
  async sendNow(e: { id: number; type: string; data: unknown }): Promise<void> {
    if (this.isClosed) return;
    if (e.id > 0 && e.id <= this.lastSentId) return;
    const ok = this.res.write(formatEvent(e));
    if (e.id > this.lastSentId) this.lastSentId = e.id;
    if (TERMINAL_EVENTS.has(e.type)) return this.end();
    if (!ok) {
      if (this.res.bufferedAmount() > this.maxBuffered) return this.drop();
      await this.res.drained();
    }
  }

  private pump(): void {
    if (this.writing) return;
    this.writing = true;
    void (async () => {
      try {
        while (!this.isClosed && this.queue.length) {
          const e = this.queue.shift() as TaskEvent;
          if (e.id <= this.lastSentId) continue;
          const ok = this.res.write(formatEvent(e));
          this.lastSentId = e.id;
          if (TERMINAL_EVENTS.has(e.type)) {
            this.end();
            break;
          }
          if (!ok) {
            if (this.res.bufferedAmount() > this.maxBuffered) {
              this.drop();
              break;
            }
            await this.res.drained();
          }
        }
      } finally {
        this.writing = false;
      }
    })();
  }

  keepAlive(): void {
    if (this.isClosed) return;
    if (this.writing && this.queue.length) return; // data is flowing (or stuck): no comment needed
    const ok = this.res.write(': keep-alive\n\n');
    if (!ok && this.res.bufferedAmount() > this.maxBuffered) this.drop();
  }

  error(message: string): void {
    if (this.isClosed) return;
    this.res.write(`event: error\ndata: ${JSON.stringify({ message })}\n\n`);
  }

  end(): void {
    if (!this.isClosed) this.res.end();
    this.finish();
  }

  /** Its credential, session or membership was invalidated: a final comment naming why, then the end. */
  revoke(reason: string): void {
    if (!this.isClosed) this.res.write(`: stream ended: ${reason}\n\n`);
    this.end();
  }

  /** Slow reader or shutdown: abrupt close. */
  drop(): void {
    if (!this.isClosed) this.res.close();
    this.finish();
  }

  private finish(): void {
    if (this.closed) return;
    this.closed = true;
    this.queue = [];
    this.pending = null;
    this.owner._closed(this);
  }
}

/** What a stream needs of its hub: one reference instead of a closure each (thousands stay open). */
interface StreamOwner {
  _closed(s: SseStream): void;
  _readAfter(s: SseStream, afterId: number): Promise<TaskEvent[]>;
  _syncError(s: SseStream, err: unknown): void;
}

const UNKNOWN_HOLDER: StreamHolder = Object.freeze({ kind: 'unknown', since: 0 }) as StreamHolder;

/** The stream's bus subscription; its own scope, so the listener keeps nothing of serve()'s. */
function follow(bus: SseHubOptions['bus'], s: SseStream): () => void {
  return bus.subscribeTask(s.taskId, (e, origin) => {
    if (e.teamId === s.teamId) s.onBus(e, origin);
  });
}

export class SseHub implements StreamOwner {
  private readonly perTeam = new Map<string, number>();
  private readonly streams = new Set<SseStream>();
  private keepAliveTimer: NodeJS.Timeout | null = null;
  private stopped = false;
  private readonly maxBuffered: number;
  /** Streams dropped for being slow (metrics/tests). */
  droppedSlow = 0;
  /** Streams ended because their credential, session or membership was invalidated (metrics/tests). */
  revoked = 0;
  private recentEnds: Array<{ at: number; match: StreamMatch; reason: string }> = [];

  constructor(private readonly o: SseHubOptions) {
    this.maxBuffered = o.maxBufferedBytes ?? 1024 * 1024;
  }

  /** @internal StreamOwner */
  _closed(s: SseStream): void {
    this.streams.delete(s);
    s.cleanup();
  }

  /** @internal StreamOwner */
  _readAfter(s: SseStream, afterId: number): Promise<TaskEvent[]> {
    return this.o.source.eventsAfter(s.teamId, s.taskId, afterId, 500);
  }

  /** @internal StreamOwner */
  _syncError(s: SseStream, err: unknown): void {
    this.o.logger.warn({ err, task_id: s.taskId }, 'sse re-read after a possible gap failed');
  }

  openStreams(teamId?: string): number {
    return teamId === undefined ? this.streams.size : (this.perTeam.get(teamId) ?? 0);
  }

  private startKeepAlive(): void {
    if (this.keepAliveTimer || this.stopped) return;
    this.keepAliveTimer = setInterval(() => {
      for (const s of this.streams) s.keepAlive();
    }, this.o.keepAliveMs);
    this.keepAliveTimer.unref();
  }

  /** Reserves a slot for the team; throws TooManyStreams at the cap. Returns the release function. */
  reserve(teamId: string): () => void {
    const n = this.perTeam.get(teamId) ?? 0;
    if (n >= this.o.maxStreamsPerTeam) throw new TooManyStreams(`this team already has ${n} open event streams (limit ${this.o.maxStreamsPerTeam})`);
    this.perTeam.set(teamId, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const m = (this.perTeam.get(teamId) ?? 1) - 1;
      if (m <= 0) this.perTeam.delete(teamId);
      else this.perTeam.set(teamId, m);
    };
  }

  /**
   * Serves one stream. Throws before anything is written for 404 (taskExists false); the caller
   * has validated the task id and reserved the slot (release is called when the stream ends).
   */
  async serve(teamId: string, taskId: string, lastEventId: number | null, res: SseSink, release: () => void, holder?: StreamHolder): Promise<'not_found' | 'served'> {
    const s = new SseStream(teamId, taskId, res, this.maxBuffered, this);
    if (holder) s.holder = holder;
    s.release = release;
    // subscribe BEFORE reading: nothing committed after the read can be missed (the stream holds
    // what arrives until its replay is done)
    s.unsub = follow(this.o.bus, s);
    let exists: boolean;
    try {
      exists = await this.o.source.exists(teamId, taskId);
    } catch (e) {
      s.cleanup();
      throw e;
    }
    if (!exists || res.aborted || this.stopped) {
      s.cleanup();
      if (this.stopped && !res.aborted) res.close();
      return exists ? 'served' : 'not_found';
    }
    this.streams.add(s);
    this.startKeepAlive();
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache, no-transform',
      'X-Accel-Buffering': 'no',
    });

    // the replay: with Last-Event-ID every event after it; without, the current status first
    for (let attempt = 0; ; attempt++) {
      try {
        if (lastEventId !== null) {
          let after = lastEventId;
          s.lastSentId = Math.max(s.lastSentId, lastEventId);
          for (;;) {
            const page = await this.o.source.eventsAfter(teamId, taskId, after, 500);
            for (const e of page) {
              await s.sendNow(e);
              if (s.isClosed) return 'served';
            }
            if (page.length < 500) break;
            after = page[page.length - 1]?.id ?? after;
          }
        } else {
          const cur = await this.o.source.current(teamId, taskId);
          if (cur.transition) await s.sendNow(cur.transition);
          if (s.isClosed) return 'served';
          if (cur.progress) await s.sendNow(cur.progress);
        }
        if (lastEventId !== null && !s.isClosed) {
          // resumed after the end: the terminal event was already seen, nothing more will come
          const cur = await this.o.source.current(teamId, taskId);
          if (cur.transition && TERMINAL_EVENTS.has(cur.transition.type)) {
            await s.sendNow(cur.transition);
            s.end();
            return 'served';
          }
        }
        break;
      } catch (err) {
        this.o.logger.warn({ err, task_id: taskId }, 'sse replay read failed');
        s.error('reading task events failed; retrying');
        if (attempt >= 2 || s.isClosed) {
          s.drop();
          return 'served';
        }
        await new Promise((r) => setTimeout(r, 250 * (attempt + 1)));
      }
    }
    if (!s.isClosed) {
      // an invalidation that arrived while this stream was opening (after its request was authenticated)
      const now = Date.now();
      const hit = this.recentEnds.find((r) => now - r.at < RECENT_END_MS && r.at >= s.holder.since && r.match(teamId, s.holder));
      if (hit) {
        this.revoked++;
        s.revoke(hit.reason);
        return 'served';
      }
      s.goLive();
    }
    return 'served';
  }

  /**
   * Ends every open stream the match selects, each with a final `: stream ended: <reason>` comment
   * (its credential was revoked, its session ended, its membership or team is gone). Streams still
   * opening are checked against it when they go live. Returns how many ended.
   */
  endWhere(match: StreamMatch, reason: string): number {
    const now = Date.now();
    this.recentEnds = this.recentEnds.filter((r) => now - r.at < RECENT_END_MS);
    this.recentEnds.push({ at: now, match, reason });
    let n = 0;
    for (const s of [...this.streams])
      if (!s.isClosed && match(s.teamId, s.holder)) {
        s.revoke(reason);
        n++;
      }
    this.revoked += n;
    return n;
  }

  /** The holders of the open streams (membership re-checks). */
  holders(): Array<{ teamId: string; holder: StreamHolder }> {
    return [...this.streams].filter((s) => !s.isClosed).map((s) => ({ teamId: s.teamId, holder: s.holder }));
  }

  /**
   * Events may have been lost cluster-wide (a membership change: a node may have died between commit
   * and publish; a bus gap or reconnect): every open stream re-reads PostgreSQL after its last event.
   */
  resync(): void {
    for (const s of this.streams) s.resync();
  }

  /** Shutdown: close every stream (clients reconnect elsewhere with Last-Event-ID). */
  closeAll(): void {
    this.stopped = true;
    if (this.keepAliveTimer) clearInterval(this.keepAliveTimer);
    this.keepAliveTimer = null;
    for (const s of [...this.streams]) s.drop();
  }
}
