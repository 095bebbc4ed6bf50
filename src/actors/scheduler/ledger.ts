/**
 * The team scheduler's fair-share ledger: GPU-seconds per submitter over a sliding window, in
 * memory, fed by the scheduler's own assign and release events (held time x the agent's GPU count,
 * at least 1) and seeded from the tasks table when the scheduler starts, so a restart does not
 * reset fairness. A released task counts in full while its release is inside the window; a held
 * task counts its held time so far. Sums are kept per submitter, so a read costs O(submitters +
 * held tasks), not O(tasks in the window). Pure bookkeeping: the caller passes the clock.
 */
export interface LedgerSeedRow {
  taskId: string;
  submitter: string;
  /** When the task was assigned (epoch ms). */
  start: number;
  /** When it let go of its agent; null = still held. */
  end: number | null;
  gpus: number;
  /** The agent and `<workflow id>@<version>` (warm placement remembers what each agent ran last). */
  agentId?: string | null;
  workflowKey?: string | null;
}

interface Closed {
  sub: string;
  start: number;
  end: number;
  gpus: number;
}

export interface LedgerUsage {
  gpuSeconds: Map<string, number>;
  active: Map<string, number>;
  /** Average GPU-seconds of a finished task in the window (60 when none). */
  quantumS: number;
}

export class UsageLedger {
  /** Released tasks in release order (a queue: pruned from the front). */
  private closed: Closed[] = [];
  private head = 0;
  private readonly sums = new Map<string, number>();
  private total = 0;
  private readonly held = new Map<string, { sub: string; start: number; gpus: number }>();

  constructor(readonly windowS: number) {}

  seed(rows: readonly LedgerSeedRow[]): void {
    this.closed = [];
    this.head = 0;
    this.sums.clear();
    this.total = 0;
    this.held.clear();
    const done: Closed[] = [];
    for (const r of rows) {
      if (r.end === null) this.held.set(r.taskId, { sub: r.submitter, start: r.start, gpus: Math.max(1, r.gpus) });
      else done.push({ sub: r.submitter, start: r.start, end: Math.max(r.start, r.end), gpus: Math.max(1, r.gpus) });
    }
    for (const c of done.sort((a, b) => a.end - b.end)) this.close(c);
  }

  private close(c: Closed): void {
    this.closed.push(c);
    const v = ((c.end - c.start) / 1000) * c.gpus;
    this.sums.set(c.sub, (this.sums.get(c.sub) ?? 0) + v);
    this.total += v;
  }

  /** The task was assigned to an agent with this many GPUs. */
  start(taskId: string, submitter: string, gpus: number, at: number): void {
    this.held.set(taskId, { sub: submitter, start: at, gpus: Math.max(1, gpus) });
  }

  /** The task let go of its agent (finished, failed, cancelled, requeued): its held time is charged. */
  end(taskId: string, at: number): void {
    const h = this.held.get(taskId);
    if (!h) return;
    this.held.delete(taskId);
    this.close({ sub: h.sub, start: h.start, end: Math.max(at, h.start), gpus: h.gpus });
  }

  /** The assignment never happened (refused): nothing is charged. */
  drop(taskId: string): void {
    this.held.delete(taskId);
  }

  /** Whether the task is held (assigned and not released). */
  holds(taskId: string): boolean {
    return this.held.has(taskId);
  }

  usage(now: number): LedgerUsage {
    const since = now - this.windowS * 1000;
    while (this.head < this.closed.length && (this.closed[this.head] as Closed).end < since) {
      const c = this.closed[this.head++] as Closed;
      const v = ((c.end - c.start) / 1000) * c.gpus;
      const left = (this.sums.get(c.sub) ?? 0) - v;
      if (left > 1e-9) this.sums.set(c.sub, left);
      else this.sums.delete(c.sub);
      this.total -= v;
    }
    if (this.head > 1024 && this.head * 2 > this.closed.length) {
      this.closed = this.closed.slice(this.head);
      this.head = 0;
    }
    const gpuSeconds = new Map(this.sums);
    const active = new Map<string, number>();
    for (const h of this.held.values()) {
      gpuSeconds.set(h.sub, (gpuSeconds.get(h.sub) ?? 0) + (Math.max(0, now - Math.max(h.start, since)) / 1000) * h.gpus);
      active.set(h.sub, (active.get(h.sub) ?? 0) + 1);
    }
    const n = this.closed.length - this.head;
    const quantumS = n > 0 ? Math.max(1, this.total / n) : 60;
    return { gpuSeconds, active, quantumS };
  }
}
