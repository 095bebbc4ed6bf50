/**
 * The gateway's side of autoscaling (docs/api.md "Autoscaling"), per node:
 *
 * - LoadMeter counts, for each autoscaled service this node serves, the requests it started, the
 *   requests in flight per replica (the balancer's counts) and the requests held in its queue
 *   (and how long they waited), and reports them every interval to the service's actor (one per
 *   cluster, wherever it lives), which sums the nodes' reports: counts are cluster-wide. A service
 *   whose counts fell to zero is reported once more (zero), then no more until it is used again.
 * - Held requests wait here for a change: the service's routing entry reloaded (a replica became
 *   healthy, a drain ended), a request of the service released its slot, or a short recheck.
 */

export interface LoadReport {
  instances: Array<{ id: string; inflight: number }>;
  queued: number;
  queueDelayMs: number;
  requests: number;
}

export interface LoadMeterDeps {
  /** Sends a report to the service's actor (fire and forget). */
  report(serviceId: string, r: LoadReport): void;
  /** Requests in flight on this node to an instance (the balancer's count). */
  inflight(instanceId: string): number;
  intervalMs: number;
  now(): number;
}

interface Entry {
  teamId: string;
  instances: Set<string>;
  requests: number;
  /** Start times of the requests held now. */
  held: Map<number, number>;
  maxDelayMs: number;
  reportedBusy: boolean;
}

/** A held request's recheck when nothing signalled meanwhile. */
const RECHECK_MS = 250;

export class LoadMeter {
  private readonly entries = new Map<string, Entry>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private timer: NodeJS.Timeout | null = null;
  private holdSeq = 0;
  private closed = false;

  constructor(private readonly d: LoadMeterDeps) {}

  private entry(serviceId: string, teamId: string): Entry {
    let e = this.entries.get(serviceId);
    if (!e) {
      this.entries.set(serviceId, (e = { teamId, instances: new Set(), requests: 0, held: new Map(), maxDelayMs: 0, reportedBusy: false }));
      this.arm();
    }
    return e;
  }

  now(): number {
    return this.d.now();
  }

  /** A request of an autoscaled service went to an instance. */
  started(serviceId: string, teamId: string, instanceId: string): void {
    const e = this.entry(serviceId, teamId);
    e.requests++;
    e.instances.add(instanceId);
  }

  /** A request is held (no replica can take it now); returns its token for holdEnd. */
  holdBegin(serviceId: string, teamId: string): number {
    const e = this.entry(serviceId, teamId);
    const token = ++this.holdSeq;
    e.held.set(token, this.d.now());
    return token;
  }

  /** The held request left the queue (forwarded, refused or abandoned): its wait is the queue delay. */
  holdEnd(serviceId: string, token: number): void {
    const e = this.entries.get(serviceId);
    const since = e?.held.get(token);
    if (!e || since === undefined) return;
    e.held.delete(token);
    e.maxDelayMs = Math.max(e.maxDelayMs, this.d.now() - since);
  }

  /** Wakes the service's held requests (a slot was released). */
  signal(serviceId: string): void {
    const ws = this.waiters.get(serviceId);
    if (!ws) return;
    this.waiters.delete(serviceId);
    for (const w of ws) w();
  }

  /** Wakes the held requests of a team's services (its routing entry was dropped: something changed). */
  signalTeam(teamId: string | null): void {
    for (const [id, e] of this.entries) if (teamId === null || e.teamId === teamId) this.signal(id);
  }

  /** Resolves at the next signal for the service, after RECHECK_MS, or at `deadline`, whichever is first. */
  wait(serviceId: string, deadline: number): Promise<void> {
    return new Promise<void>((resolve) => {
      let set = this.waiters.get(serviceId);
      if (!set) this.waiters.set(serviceId, (set = new Set()));
      const s = set;
      const done = (): void => {
        clearTimeout(t);
        s.delete(done);
        resolve();
      };
      const t = setTimeout(done, Math.max(0, Math.min(RECHECK_MS, deadline - this.d.now())));
      s.add(done);
    });
  }

  /** One report per service with something to say; stops the timer when nothing is left. */
  flush(): void {
    const now = this.d.now();
    for (const [id, e] of this.entries) {
      const instances: LoadReport['instances'] = [];
      let total = 0;
      for (const i of e.instances) {
        const n = this.d.inflight(i);
        instances.push({ id: i, inflight: n });
        total += n;
        if (n === 0) e.instances.delete(i);
      }
      let delay = e.maxDelayMs;
      for (const since of e.held.values()) delay = Math.max(delay, now - since);
      const busy = total > 0 || e.held.size > 0;
      if (!busy && e.requests === 0 && delay === 0 && !e.reportedBusy) {
        this.entries.delete(id);
        continue;
      }
      this.d.report(id, { instances, queued: e.held.size, queueDelayMs: delay, requests: e.requests });
      e.requests = 0;
      e.maxDelayMs = 0;
      e.reportedBusy = busy;
    }
    if (this.entries.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  private arm(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => this.flush(), this.d.intervalMs);
    this.timer.unref();
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.signalTeam(null);
  }
}
