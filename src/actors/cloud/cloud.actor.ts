import type { Actor, ActorContext } from '../runtime/system.js';
import { CLOUD_DISPATCHER_KIND, TASK_KIND } from '../../domain/tasks/record.js';
import type { CloudJobCallbacks, CloudJobResult, CloudJobsPort, Protocols, TaskStorePort } from '../ports.js';
import { decideCloud, enqueue, initialCloudState, type CloudEffect, type CloudInput, type CloudState } from './decide.js';
import { CloudDispatcherMsg, type CloudDispatcherReply } from './protocol.js';

export const CLOUD_DISPATCHER = CLOUD_DISPATCHER_KIND;

export interface CloudDispatcherDeps {
  tasks: TaskStorePort;
  jobs: CloudJobsPort;
  askTimeoutMs: number;
}

export const parseCloudDispatcherMsg = (m: CloudDispatcherMsg): CloudDispatcherMsg => CloudDispatcherMsg.parse(m);

type Ctx = ActorContext<Protocols, typeof CLOUD_DISPATCHER>;

/** `<team>:<provider>` */
export function parseCloudDispatcherId(id: string): { teamId: string; provider: string } {
  const at = id.lastIndexOf(':');
  return { teamId: id.slice(0, at), provider: id.slice(at + 1) };
}

/**
 * One per (team, provider): the queue on our side of the provider's concurrency limit, and the
 * jobs it follows. Decisions are the pure decideCloud(); this shell runs them. A provider job is
 * I/O started with reenterAfter (the runner: submit or re-attach, follow, copy outputs); what it
 * reports becomes task messages (cloud_accept, cloud_start, progress, finish, fail, cloud_reject),
 * so every transition goes through the task actor's fenced writes, events and webhooks as for an
 * agent task. State is rebuilt from PostgreSQL on activation (pending tasks queue again, accepted
 * ones are re-attached by their recorded prompt_id), so a node crash loses no job.
 */
export class CloudDispatcherActor implements Actor<Protocols, typeof CLOUD_DISPATCHER> {
  private s: CloudState = initialCloudState(1);
  private readonly teamId: string;
  private readonly provider: string;
  private readonly aborts = new Map<string, AbortController>();

  constructor(
    id: string,
    private readonly ctx: Ctx,
    private readonly d: CloudDispatcherDeps,
  ) {
    const p = parseCloudDispatcherId(id);
    this.teamId = p.teamId;
    this.provider = p.provider;
  }

  async onActivate(): Promise<void> {
    const [capacity, waiting, active] = await Promise.all([this.d.jobs.capacity(this.teamId, this.provider), this.d.tasks.schedulable(this.teamId), this.d.tasks.active(this.teamId)]);
    this.s = initialCloudState(capacity ?? 1);
    for (const t of waiting) if (t.dispatchTarget === this.provider) enqueue(this.s, t);
    // jobs the provider accepted before this activation (another node, a crash): follow them again
    for (const t of active) if (t.dispatchTarget === this.provider) this.ctx.system.tell(this.ctx.self, { type: 'resume', taskId: t.id, epoch: t.leaseEpoch });
    this.ctx.system.tell(this.ctx.self, { type: 'kick' });
  }

  async onPassivate(): Promise<void> {
    // stop following here (passivation or the cluster moved the dispatcher): the provider's jobs go
    // on, and the next owner re-attaches to them
    for (const a of this.aborts.values()) a.abort();
    this.aborts.clear();
  }

  receive(m: CloudDispatcherMsg): CloudDispatcherReply | undefined {
    return this.step(m);
  }

  private step(m: CloudInput): CloudDispatcherReply | undefined {
    const dec = decideCloud(this.s, m, this.ctx.clock.now());
    for (const e of dec.effects) this.run(e);
    return dec.reply;
  }

  private run(e: CloudEffect): void {
    switch (e.type) {
      case 'start':
        this.start(e.taskId, e.attempt, e.epoch);
        return;
      case 'abort':
        this.aborts.get(e.taskId)?.abort();
        this.aborts.delete(e.taskId);
        return;
      case 'cancel_job':
        this.ctx.reenterAfter(this.d.jobs.cancel(this.teamId, this.provider, e.taskId), (r) => {
          if (!r.ok) this.ctx.log.warn({ task_id: e.taskId, provider: this.provider, err_message: (r.error as Error).message }, 'cloud: cancelling the provider job failed');
        });
        return;
      case 'set_timer':
        this.ctx.setTimer('kick', Math.max(1, e.ms), { type: 'kick' });
        return;
    }
  }

  private start(taskId: string, attempt: number, startEpoch: number | null): void {
    const ac = new AbortController();
    this.aborts.set(taskId, ac);
    const task = { kind: TASK_KIND, id: taskId } as const;
    const sys = this.ctx.system;
    const log = this.ctx.log;
    let epoch = startEpoch;
    const cb: CloudJobCallbacks = {
      accepted: async () => {
        if (epoch !== null) return epoch;
        const r = await sys.ask(task, { type: 'cloud_accept' }, { deadlineMs: this.ctx.clock.now() + this.d.askTimeoutMs });
        if (!r.ok) return null;
        epoch = r.epoch;
        return epoch;
      },
      started: () => {
        if (epoch !== null && !ac.signal.aborted) sys.tell(task, { type: 'cloud_start', epoch });
      },
      progress: (p) => {
        if (epoch !== null && !ac.signal.aborted) sys.tell(task, { type: 'progress', epoch, progress: p });
      },
      trouble: (what) => log.warn({ task_id: taskId, team_id: this.teamId, provider: this.provider, reason: what }, 'cloud job: transient trouble'),
    };
    const work = this.d.jobs.run({ teamId: this.teamId, provider: this.provider, taskId, attempt, epoch: startEpoch }, cb, ac.signal).then((res: CloudJobResult) => {
      if (ac.signal.aborted) return res;
      if (res.kind === 'completed' && epoch !== null) sys.tell(task, { type: 'finish', epoch, output: res.output });
      else if (res.kind === 'failed') sys.tell(task, epoch === null ? { type: 'cloud_reject', error: res.error } : { type: 'fail', epoch, error: res.error });
      return res;
    });
    this.ctx.reenterAfter(work, (r) => {
      if (this.aborts.get(taskId) === ac) this.aborts.delete(taskId);
      const later = r.ok && r.value.kind === 'later' ? { retryInMs: r.value.retryInMs } : null;
      if (!r.ok) log.error({ task_id: taskId, err: r.error }, 'cloud job runner failed');
      if (later && r.ok && r.value.kind === 'later') log.info({ task_id: taskId, provider: this.provider, reason: r.value.reason, retry_in_ms: later.retryInMs }, 'cloud: provider busy, task stays queued');
      this.step({ type: 'ended', taskId, later });
      this.refreshCapacity();
    });
  }

  /** The team may have changed max_concurrent_jobs (PUT /cloud-providers): re-read it after each job. */
  private refreshCapacity(): void {
    this.ctx.reenterAfter(this.d.jobs.capacity(this.teamId, this.provider), (r) => {
      if (!r.ok || r.value === null || r.value === this.s.capacity) return;
      this.s.capacity = Math.max(1, r.value);
      this.step({ type: 'kick' });
    });
  }
}
