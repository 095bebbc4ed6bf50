/**
 * The team scheduler's fair-share ledger: GPU-seconds per submitter over a sliding window, in
 * memory, fed by the scheduler's own assign and release events (held time x the agent's GPU count,
 * at least 1) and seeded from the tasks table when the scheduler starts, so a restart does not
 * reset fairness. Pure bookkeeping: the caller passes the clock.
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
  private closed: Closed[] = [];
  private readonly held = new Map<string, { sub: string; start: number; gpus: number }>();

  constructor(readonly windowS: number) {}

  seed(rows: readonly LedgerSeedRow[]): void {
    this.closed = [];
    this.held.clear();
    const done: Closed[] = [];
    for (const r of rows) {
      if (r.end === null) this.held.set(r.taskId, { sub: r.submitter, start: r.start, gpus: Math.max(1, r.gpus) });
      else done.push({ sub: r.submitter, start: r.start, end: r.end, gpus: Math.max(1, r.gpus) });
    }
    this.closed = done.sort((a, b) => a.end - b.end);
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
    this.closed.push({ sub: h.sub, start: h.start, end: Math.max(at, h.start), gpus: h.gpus });
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
    let drop = 0;
    while (drop < this.closed.length && (this.closed[drop] as Closed).end < since) drop++;
    if (drop > 0) this.closed.splice(0, drop);
    const gpuSeconds = new Map<string, number>();
    const active = new Map<string, number>();
    let total = 0;
    for (const c of this.closed) {
      gpuSeconds.set(c.sub, (gpuSeconds.get(c.sub) ?? 0) + (Math.max(0, c.end - Math.max(c.start, since)) / 1000) * c.gpus);
      total += ((c.end - c.start) / 1000) * c.gpus;
    }
    for (const h of this.held.values()) {
      gpuSeconds.set(h.sub, (gpuSeconds.get(h.sub) ?? 0) + (Math.max(0, now - Math.max(h.start, since)) / 1000) * h.gpus);
      active.set(h.sub, (active.get(h.sub) ?? 0) + 1);
    }
    const quantumS = this.closed.length > 0 ? Math.max(1, total / this.closed.length) : 60;
    return { gpuSeconds, active, quantumS };
  }
}
