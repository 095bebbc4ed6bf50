import type { Actor, ActorContext } from '../runtime/system.js';
import { AGENT_KIND, CONTAINER_SERVICE_KIND } from '../../domain/tasks/record.js';
import type { ContainerChangesPort, ContainerStorePort, Protocols } from '../ports.js';
import { ContainerServiceMsg, type ContainerServiceMsg as Msg, type ContainerServiceReplies } from './protocol.js';
import { OPERATION_FROM, autoscaleOf, type Autoscale, type InstanceState, type ServiceInstance, type ServiceRecord, type ServiceStatus } from '../../domain/containers/schema.js';
import { conflict, notFound } from '../../shared/errors.js';
import { uuidv7 } from '../../shared/ids.js';
import { detailOf, isLive, place, runningStatus, settleRun } from './decide.js';
import { ServiceScaler } from './scaler.js';
import { ServiceReplicas } from './replicas.js';
import { ServiceRollout } from './rolling.js';
import type { ReplyHandle } from '../runtime/actor.js';
import { specRevision } from './rollout.js';

export const CONTAINER_SERVICE = CONTAINER_SERVICE_KIND;

export interface ContainerActorDeps {
  store: ContainerStorePort;
  changes: ContainerChangesPort;
  /** How long an instance whose agent is offline keeps its place before it is re-placed. */
  agentGraceMs: number;
  /** Reconcile period while the service should run or is stopping. */
  tickMs: number;
  /** Autoscaling (src/actors/container/autoscale.ts): the gateways' report interval (also the actor's evaluation period), the cool-down, the queue delay that adds a replica. */
  autoscale?: { intervalMs: number; cooldownMs: number; queueDelayMs: number };
  /** Cold starts (a replica started for a request while the service had none), for /metrics. */
  metrics?: ContainerMetricsPort;
  /** Rolling updates (src/actors/container/rollout.ts): how long a new replica has to become healthy. */
  rollout?: { healthTimeoutMs: number };
}

export interface ContainerMetricsPort {
  coldStart(ms: number): void;
}

const AUTOSCALE_DEFAULTS = { intervalMs: 1_000, cooldownMs: 60_000, queueDelayMs: 500 };
const ROLLOUT_HEALTH_TIMEOUT_MS = 300_000;

export const parseContainerServiceMsg = (m: Msg): Msg => ContainerServiceMsg.parse(m);

type Ctx = ActorContext<Protocols, typeof CONTAINER_SERVICE>;
type Reply = ContainerServiceReplies[keyof ContainerServiceReplies];
type Target = 'run' | 'stop' | 'remove' | 'delete' | 'idle';

/**
 * One per container service (virtual actor keyed by service id): the only writer of the
 * service's state and of its instances. It places replicas on eligible agents (decide.place), tells
 * their agents to start, stop or remove instances (through each agent's actor, on whichever node
 * holds its stream), follows what the agents report, and re-places a replica whose agent stayed
 * offline past the grace period. Writes go through one ordered chain started from turns (a turn
 * never awaits); placement reads come back as later turns (reenterAfter).
 */
export class ContainerServiceActor implements Actor<Protocols, typeof CONTAINER_SERVICE> {
  private svc: ServiceRecord | null = null;
  private target: Target = 'idle';
  private message = '';
  private placing = false;
  private placementFailed = false;
  /** agent id -> when its stream was seen down (instances there are re-placed after the grace). */
  private downSince = new Map<string, number>();
  /** Replicas that failed in a row (reset when one becomes healthy): re-placement backs off. */
  private failuresInRow = 0;
  private notBefore = 0;
  /** Autoscaling's state (src/actors/container/scaler.ts); held requests wait here for a placement. */
  private readonly sc = new ServiceScaler();
  private readonly r: ServiceReplicas;
  private wakeWaiters: Array<ReplyHandle<Reply>> = [];
  /** The rolling update under way or the last one's outcome (rolling.ts). */
  private readonly ro: ServiceRollout;

  constructor(
    private readonly serviceId: string,
    private readonly ctx: Ctx,
    private readonly d: ContainerActorDeps,
  ) {
    this.r = new ServiceReplicas(serviceId, ctx, d, () => this.svc);
    this.ro = new ServiceRollout(this.r, this.sc, d.store, d.rollout?.healthTimeoutMs ?? ROLLOUT_HEALTH_TIMEOUT_MS);
  }

  async onActivate(): Promise<void> {
    this.svc = await this.d.store.byId(this.serviceId);
    if (!this.svc) return;
    for (const i of await this.d.store.instances(this.serviceId)) this.r.byId.set(i.id, i);
    this.message = this.svc.detail.message ?? '';
    this.target = targetOf(this.svc.status);
    // autoscaling resumes from what was written: the replicas serving, those draining
    const now = this.ctx.clock.now();
    for (const id of this.svc.detail.draining ?? []) if (this.r.byId.has(id)) this.sc.draining.set(id, now);
    this.sc.desired = this.svc.detail.desired ?? [...this.r.byId.values()].filter((i) => isLive(i) && !this.sc.draining.has(i.id)).length;
    this.sc.observedSince = now;
    this.ro.current = this.svc.detail.rollout ?? null;
    if (this.svc.detail.lastColdStartMs !== undefined) this.sc.lastColdStart = { ms: this.svc.detail.lastColdStartMs, at: this.svc.detail.coldStartAt ?? 0 };
    if (this.target !== 'idle') this.ctx.setTimer('tick', this.tickEvery(), { type: 'tick' });
  }

  receive(m: Msg): Reply | undefined {
    switch (m.type) {
      case 'op': {
        // answered once the state write has landed: a caller that proxies right after sees it
        this.r.pendingAudit = m.audit ?? null;
        let status: { status: string };
        try {
          status = this.op(m.op);
          // an operation that wrote no state (nothing changed in the record) is still recorded
          const left = this.r.takeAudit();
          if (left) this.r.write(() => this.d.store.audit(left));
        } finally {
          this.r.pendingAudit = null;
        }
        const handle = this.ctx.deferReply();
        const done = this.r.writes;
        this.ctx.reenterAfter(done, () => handle.resolve(status));
        return undefined;
      }
      case 'changed':
        this.ctx.reenterAfter(this.d.store.byId(this.serviceId), (r) => {
          if (!('value' in r) || !r.value) return;
          const before = this.svc;
          this.svc = { ...r.value, status: before?.status ?? r.value.status, detail: before?.detail ?? r.value.detail };
          if (before) this.specChanged(before);
        });
        return { ok: true };
      case 'report':
        this.report(m.agentId, m.instanceId, m.state, m.healthy, m.error);
        return { ok: true };
      case 'agent_down':
        if (!this.downSince.has(m.agentId)) this.downSince.set(m.agentId, this.ctx.clock.now());
        this.reconcile();
        return { ok: true };
      case 'agent_up': {
        this.downSince.delete(m.agentId);
        // an agent that restarted without one of our replicas (it died with the agent) lost it
        const held = new Set(m.held);
        for (const i of this.r.byId.values()) {
          if (i.agentId !== m.agentId || held.has(i.id) || !isLive(i)) continue;
          // a start that never reached it is sent again; a replica it had is lost
          if (i.status === 'pending') this.r.start(i);
          else {
            Object.assign(i, { status: 'failed', healthy: false, error: 'the agent restarted without this instance', updatedAt: this.ctx.clock.now() });
            this.r.put(i);
          }
        }
        this.reconcile();
        return { ok: true };
      }
      case 'tick':
        // an agent reported down may have reconnected elsewhere (its up and down crossed): check PostgreSQL
        if (this.downSince.size > 0 && this.svc) {
          this.ctx.reenterAfter(this.d.store.placementAgents(this.svc.teamId), (r) => {
            if ('value' in r) for (const a of r.value) this.downSince.delete(a.id);
            this.reconcile();
          });
        } else {
          this.sample(0, 0);
          this.reconcile();
        }
        if (this.target !== 'idle') this.ctx.setTimer('tick', this.tickEvery(), { type: 'tick' });
        return { ok: true };
      case 'load': {
        const now = this.ctx.clock.now();
        this.sc.nodes.set(m.node, { at: now, instances: new Map(m.instances.map((i) => [i.id, i.inflight])), queued: m.queued });
        this.sample(m.requests, m.queueDelayMs);
        this.reconcile();
        return { ok: true };
      }
      case 'wake': {
        // a held request counts as one queued request now (its node's next report follows)
        this.sample(1, 0, 1);
        this.reconcile();
        if (!this.placing || !this.autoscale()) return { scaleError: this.sc.scaleError };
        this.wakeWaiters.push(this.ctx.deferReply());
        return undefined;
      }
      case 'get':
        return { serviceId: this.serviceId, status: this.svc?.status ?? null, instances: [...this.r.byId.values()].map((i) => ({ id: i.id, agentId: i.agentId, status: i.status, healthy: i.healthy })) };
    }
  }

  // ---------------------------------------------------------------------------------------------

  private op(op: 'deploy' | 'start' | 'stop' | 'undeploy' | 'delete'): { status: string } {
    const svc = this.svc;
    if (!svc) throw notFound('container service', 'service_not_found');
    if (!OPERATION_FROM[op].includes(svc.status)) throw conflict('invalid_state', `cannot ${op} a service in state ${svc.status} (allowed from: ${OPERATION_FROM[op].join(', ')})`);
    const external = svc.type === 'external';
    switch (op) {
      case 'deploy':
      case 'start':
        // a fresh deploy drops every earlier instance, a start the failed ones (they are replaced)
        for (const i of [...this.r.byId.values()]) if (op === 'deploy' || i.status === 'failed') this.dropInstance(i);
        this.target = 'run';
        this.placementFailed = false;
        this.failuresInRow = 0;
        this.notBefore = 0;
        this.resetScaling();
        // a fresh deploy places the spec as it is: an earlier rollout's outcome is history
        if (op === 'deploy' || this.ro.rolling) this.ro.current = null;
        this.message = external ? '' : 'placing replicas';
        if (external) this.setStatus('running');
        else {
          if (op === 'start') for (const i of this.r.byId.values()) if (i.status === 'stopped') this.r.start(i);
          this.setStatus('deploying');
        }
        break;
      case 'stop':
        this.target = 'stop';
        this.message = '';
        this.sc.draining.clear();
        for (const i of this.r.byId.values()) if (isLive(i)) this.r.command(i, 'stop');
        this.setStatus(external ? 'stopped' : 'stopping');
        break;
      case 'undeploy':
        this.target = 'remove';
        this.message = '';
        this.sc.draining.clear();
        for (const i of this.r.byId.values()) this.r.command(i, 'remove');
        this.setStatus(external ? 'created' : 'stopping');
        break;
      case 'delete':
        this.target = 'delete';
        for (const i of this.r.byId.values()) this.r.command(i, 'remove');
        const audit = this.r.takeAudit();
        this.r.write(() => this.d.store.delete(svc.id, audit));
        this.svc = null;
        this.r.byId.clear();
        this.r.notifyChanged(svc.teamId);
        this.ctx.stop();
        return { status: 'deleted' };
    }
    this.ctx.setTimer('tick', this.tickEvery(), { type: 'tick' });
    this.reconcile();
    return { status: this.svc?.status ?? 'deleted' };
  }

  private report(agentId: string, instanceId: string, state: InstanceState, healthy: boolean, error: string): void {
    this.downSince.delete(agentId);
    const svc = this.svc;
    const i = this.r.byId.get(instanceId);
    if (!svc || !i) {
      // an instance this service does not know (deleted service, undeployed meanwhile): remove it
      if (state !== 'removed') this.ctx.system.tell({ kind: AGENT_KIND, id: agentId }, { type: 'server_msg', msg: { type: 'container', cmd: { op: 'remove', instanceId } } });
      return;
    }
    if (i.agentId !== agentId) return;
    if (state === 'removed') {
      this.sc.draining.delete(instanceId);
      this.r.byId.delete(instanceId);
      this.r.write(() => this.d.store.deleteInstance(instanceId));
    } else {
      // a replica that should not run (stop/undeploy raced with its start): tell the agent again
      if ((this.target === 'stop' && (state === 'running' || state === 'starting')) || this.target === 'remove') this.r.command(i, this.target === 'stop' ? 'stop' : 'remove');
      if (i.status === state && i.healthy === healthy && i.error === error) return this.reconcile();
      Object.assign(i, { status: state, healthy, error, updatedAt: this.ctx.clock.now() });
      this.r.put(i);
      if (state === 'failed') {
        this.message = `instance ${instanceId.slice(0, 8)} on agent ${agentId.slice(0, 8)} failed: ${firstLine(error)}`;
        this.backOff();
      } else if (state === 'running' && healthy) {
        this.failuresInRow = 0;
        this.coldStartEnded();
      }
    }
    this.reconcile();
  }

  /** Compares what should be with what is: places missing replicas, re-places lost ones, settles stop/undeploy. */
  private reconcile(): void {
    const svc = this.svc;
    if (!svc || svc.type === 'external') return;
    const now = this.ctx.clock.now();
    if (this.target === 'run') {
      // replicas whose agent has been down past the grace are given up (and removed if it returns)
      for (const i of [...this.r.byId.values()]) {
        const since = this.downSince.get(i.agentId);
        if (since !== undefined && now - since >= this.d.agentGraceMs && isLive(i)) {
          Object.assign(i, { status: 'failed', healthy: false, error: 'agent offline', updatedAt: now });
          this.r.put(i);
          this.downSince.delete(i.agentId);
          this.message = `agent ${i.agentId.slice(0, 8)} went offline; re-placing its replica`;
        }
      }
      // a rolling update steps first (a failed new replica rolls it back rather than being replaced)
      if (this.ro.rolling) this.stepRollout(svc, now);
      // failed replicas are replaced (removed from their agent, a new one placed), unless every
      // placed replica of a deploying service failed: then it ends failed
      const settled = settleRun(svc.status, [...this.r.byId.values()], this.placementFailed);
      if (settled.status === 'failed') {
        this.setStatus('failed');
        this.target = 'idle';
        return;
      }
      for (const id of settled.replace) this.dropInstance(this.r.byId.get(id) as ServiceInstance);
      // autoscaling pauses while a rollout replaces replicas (its drains are the rollout's)
      if (this.ro.rolling) {
        /* the rollout decides */
      } else if (svc.status === 'running') this.scale(now);
      else if (!this.autoscale()) this.sc.draining.clear();
      if (this.serving() < this.wanted() && !this.placing && now >= this.notBefore) this.startPlacement(svc);
      const next = runningStatus(svc.status, [...this.r.byId.values()], this.placementFailed);
      this.setStatus(next);
      if (next === 'failed') this.target = 'idle';
    } else if (this.target === 'stop' || this.target === 'remove') {
      for (const i of [...this.r.byId.values()]) {
        const down = this.downSince.has(i.agentId);
        if (this.target === 'remove' && down) {
          // the agent removes it when it reconnects (its hello reports an instance we do not know)
          this.r.byId.delete(i.id);
          this.r.write(() => this.d.store.deleteInstance(i.id));
        } else if (this.target === 'stop' && down && isLive(i)) {
          Object.assign(i, { status: 'stopped', healthy: false, updatedAt: now });
          this.r.put(i);
        }
      }
      const busy = [...this.r.byId.values()].some((i) => (this.target === 'remove' ? true : isLive(i)));
      if (!busy) {
        this.setStatus(this.target === 'stop' ? 'stopped' : 'created');
        this.target = 'idle';
      } else this.setStatus('stopping');
    }
  }

  private startPlacement(svc: ServiceRecord, surge = 0): void {
    this.placing = true;
    const read = Promise.all([this.d.store.placementAgents(svc.teamId), this.d.store.gpuUsage(svc.teamId, svc.id)]);
    this.ctx.reenterAfter(read, (r) => {
      this.placing = false;
      if (!('value' in r) || !this.svc || this.target !== 'run') return;
      const [agents, used] = r.value;
      const online = agents.filter((a) => !this.downSince.has(a.id));
      const mine = new Map<string, number>();
      for (const i of this.r.byId.values()) if (isLive(i)) mine.set(i.agentId, (mine.get(i.agentId) ?? 0) + 1);
      const want = this.wanted() - this.serving() + (surge > 0 && this.ro.rolling ? surge : 0);
      if (want <= 0) return this.answerWakes();
      const { chosen, reason } = place(this.svc, want, online, mine, used);
      // a rollout's new replica that cannot be placed fails the rollout
      if (surge > 0 && chosen.length === 0 && this.ro.rolling) {
        this.rollBack(`no agent could take a replica of the new spec: ${reason}`);
        this.reconcile();
        return this.answerWakes();
      }
      const revision = specRevision(this.svc);
      this.sc.scaleError = chosen.length === 0 ? reason : '';
      // autoscaled: a scale-up that found no agent is retried with the replica backoff, not every tick
      if (chosen.length === 0 && this.autoscale()) this.backOff();
      for (const agentId of chosen) {
        const i: ServiceInstance = { id: uuidv7(), agentId, status: 'pending', healthy: false, error: '', updatedAt: this.ctx.clock.now(), revision };
        this.r.byId.set(i.id, i);
        this.r.placedAt.set(i.id, this.ctx.clock.now());
        this.r.put(i);
        this.r.start(i);
      }
      this.placementFailed = chosen.length === 0 && reason !== '';
      this.message = reason || (chosen.length ? `placed ${chosen.length} replica(s)` : this.message);
      this.reconcile();
      this.answerWakes();
    });
  }

  // ---------------------------------------------------------------------------------------------
  // rolling updates

  /**
   * The definition changed (PUT): when the spec replicas run changed on a running service, its
   * replicas are rolled to the new one (rolling.ts).
   */
  private specChanged(before: ServiceRecord): void {
    const svc = this.svc;
    if (!svc || svc.type !== 'deployed') return;
    const to = specRevision(svc);
    if (specRevision(before) === to) return;
    if (svc.status !== 'running' || this.target !== 'run') {
      // not running: the next deploy or start places the new spec (a deploying service's replicas are
      // replaced as they come: the old-spec ones still starting are dropped and placed again)
      if (svc.status === 'deploying' && this.target === 'run') for (const i of [...this.r.byId.values()]) if (isLive(i) && i.revision !== to) this.dropInstance(i);
    } else this.message = this.ro.begin(before, svc, this.wanted());
    this.reconcile();
  }

  /** One step of the rollout: remove drained old replicas, start or drain one, end, or roll back. */
  private stepRollout(svc: ServiceRecord, now: number): void {
    const step = this.ro.step(this.settings(), this.wanted(), now);
    if ('rollback' in step) return this.rollBack(step.rollback);
    this.message = step.message;
    if (step.start && !this.placing) this.startPlacement(svc, 1);
  }

  /** The rollout failed: back to the previous spec (rolling.ts). */
  private rollBack(reason: string): void {
    const message = this.svc ? this.ro.rollBack(this.svc, reason) : null;
    if (message === null) return;
    this.message = message;
    // the failure that stopped it does not delay replacing a lost old replica
    this.failuresInRow = 0;
    this.notBefore = 0;
  }

  // ---------------------------------------------------------------------------------------------
  // autoscaling

  private autoscale(): Autoscale | null {
    return this.svc ? autoscaleOf(this.svc) : null;
  }

  private settings(): { intervalMs: number; cooldownMs: number; queueDelayMs: number } {
    return this.d.autoscale ?? AUTOSCALE_DEFAULTS;
  }

  /** Reconcile period: the autoscaling interval when it is shorter. */
  private tickEvery(): number {
    return this.autoscale() ? Math.min(this.d.tickMs, this.settings().intervalMs) : this.d.tickMs;
  }

  /** Replicas that should serve: the autoscaler's count, else replica_count. */
  private wanted(): number {
    return this.autoscale() ? this.sc.desired : (this.svc?.replicaCount ?? 0);
  }

  /** Live replicas that are not draining. */
  private serving(): number {
    let n = 0;
    for (const i of this.r.byId.values()) if (isLive(i) && !this.sc.draining.has(i.id)) n++;
    return n;
  }

  private resetScaling(): void {
    this.sc.reset(this.autoscale(), this.ctx.clock.now());
  }

  /** One load sample now: cluster-wide in flight and queued from the nodes' fresh reports. */
  private sample(requests: number, queueDelayMs: number, extraQueued = 0): void {
    const as = this.autoscale();
    if (as) this.sc.sample(this.settings(), requests, queueDelayMs, extraQueued, this.ctx.clock.now());
  }

  /** Applies the autoscaler's decision: the count to serve, replicas to drain, bring back or remove. */
  private scale(now: number): void {
    const as = this.autoscale();
    if (!as) {
      this.sc.draining.clear();
      return;
    }
    const dec = this.sc.scale(as, this.settings(), this.r.byId.values(), now);
    for (const id of dec.remove) {
      const i = this.r.byId.get(id);
      if (i) this.dropInstance(i);
    }
    if (dec.reason) this.message = dec.reason;
  }

  /** The first replica of a cold start became healthy: its duration goes to the status and /metrics. */
  private coldStartEnded(): void {
    const ms = this.sc.coldStartEnded(this.ctx.clock.now());
    if (ms === null) return;
    this.message = `cold start: a replica became healthy ${ms} ms after the request that woke the service`;
    this.d.metrics?.coldStart(ms);
  }

  private answerWakes(): void {
    if (this.placing) return;
    for (const h of this.wakeWaiters.splice(0)) h.resolve({ scaleError: this.sc.scaleError });
  }

  /** The autoscaling part of the written detail. */
  private scaleDetail(): Partial<ServiceRecord['detail']> {
    // the spec to roll back to is kept only while rolling
    const rollout = this.ro.current ? { rollout: this.ro.current } : {};
    if (!this.autoscale()) return { ...(this.sc.draining.size ? { draining: [...this.sc.draining.keys()].sort() } : {}), ...rollout };
    return { ...this.sc.detail(), ...rollout };
  }

  /** A replica failed: the next placement waits 1 s, doubling per failure in a row, up to 30 s (no hot crash loop). */
  private backOff(): void {
    this.failuresInRow++;
    this.notBefore = this.ctx.clock.now() + Math.min(30_000, 1_000 * 2 ** Math.min(this.failuresInRow - 1, 5));
  }

  /** Forgets an instance: its agent removes it (a later report of it is ignored), its row goes. */
  private dropInstance(i: ServiceInstance): void {
    this.r.drop(i);
    this.sc.draining.delete(i.id);
  }

  private setStatus(status: ServiceStatus): void {
    const svc = this.svc;
    if (!svc) return;
    const detail = svc.type === 'external' ? { message: this.message } : { ...detailOf([...this.r.byId.values()], this.message), ...this.scaleDetail() };
    if (svc.status === status && JSON.stringify(detail) === JSON.stringify(svc.detail)) return;
    svc.status = status;
    svc.detail = detail;
    const audit = this.r.takeAudit();
    this.r.write(() => this.d.store.setStatus(svc.id, status, detail, audit));
    this.r.notifyChanged(svc.teamId);
  }

}

const targetOf = (s: ServiceStatus): Target => (s === 'deploying' || s === 'running' ? 'run' : s === 'stopping' ? 'stop' : 'idle');
const firstLine = (s: string): string => (s.split('\n')[0] ?? '').slice(0, 300);
