/**
 * A container service's rolling update as its actor (container.actor.ts) drives it: the rollout
 * under way or the last one's outcome (status_detail.rollout). Each step is decided by the pure
 * `decideRollout` (rollout.ts); this applies it to the replicas: removes drained old ones, drains
 * one, says when to start a new one, completes, or rolls back to the previous spec.
 */
import type { RolloutDetail, ServiceInstance, ServiceRecord } from '../../domain/containers/schema.js';
import { decideRollout, specOf, specRevision, type RolloutReplica } from './rollout.js';
import type { ServiceReplicas } from './replicas.js';
import type { ScaleSettings, ServiceScaler } from './scaler.js';
import type { ContainerStorePort } from '../ports.js';

export class ServiceRollout {
  current: RolloutDetail | null = null;

  constructor(
    private readonly r: ServiceReplicas,
    private readonly sc: ServiceScaler,
    private readonly store: Pick<ContainerStorePort, 'restoreSpec'>,
    private readonly healthTimeoutMs: number,
  ) {}

  get rolling(): boolean {
    return this.current?.state === 'rolling';
  }

  /**
   * The running service's spec changed from `before`: its replicas roll to the new one (a change
   * while rolling retargets the rollout, keeping the spec of the replicas it started from to roll
   * back to). Returns the message.
   */
  begin(before: ServiceRecord, svc: ServiceRecord, wanted: number): string {
    const from = specRevision(before);
    const rolling = this.rolling ? this.current : null;
    this.current = {
      state: 'rolling',
      from: rolling ? rolling.from : from,
      to: specRevision(svc),
      updated: 0,
      total: wanted,
      message: `rolling ${wanted} replica(s) from revision ${rolling ? rolling.from : from} to ${specRevision(svc)}`,
      previous: rolling?.previous ?? specOf(before),
    };
    return this.current.message;
  }

  /** One step (decideRollout): removes drained old replicas, drains one; says whether to start one, the message, or why to roll back. */
  step(st: ScaleSettings, wanted: number, now: number): { rollback: string } | { start: boolean; message: string } {
    const r = this.current as RolloutDetail;
    const perReplica = this.sc.inflightPerReplica(st, now);
    const replicas: RolloutReplica[] = [...this.r.byId.values()].map((i) => ({
      id: i.id,
      revision: i.revision ?? '',
      status: i.status,
      healthy: i.healthy,
      error: i.error,
      placedAt: this.r.placedAt.get(i.id) ?? now,
      drainingSince: this.sc.draining.get(i.id) ?? null,
      inflight: perReplica.get(i.id) ?? 0,
    }));
    for (const x of replicas) if (!this.r.placedAt.has(x.id)) this.r.placedAt.set(x.id, now);
    const dec = decideRollout(replicas, r.to, wanted, { healthTimeoutMs: this.healthTimeoutMs, drainSettleMs: st.intervalMs * 2 }, now);
    if (dec.rollback) return { rollback: dec.rollback };
    for (const id of dec.remove) {
      const i = this.r.byId.get(id);
      if (i) this.drop(i);
    }
    for (const id of dec.drain) this.sc.draining.set(id, now);
    r.updated = dec.updated;
    r.total = wanted;
    if (dec.completed) {
      this.current = { ...r, state: 'completed', message: `every replica runs revision ${r.to}` };
      delete this.current.previous;
      return { start: false, message: this.current.message };
    }
    r.message = `${dec.updated} of ${wanted} replica(s) run revision ${r.to}`;
    return { start: dec.start, message: `rolling update: ${r.message}` };
  }

  /**
   * The rollout failed: the new-spec replicas go, the old ones serve again (undrained), and the
   * service's spec goes back to the previous one (stored, and told to every node's routing table).
   * Returns the message, or null when no rollout was under way.
   */
  rollBack(svc: ServiceRecord, reason: string): string | null {
    const r = this.current;
    if (!r || r.state !== 'rolling') return null;
    for (const i of [...this.r.byId.values()]) {
      if (i.revision === r.to) this.drop(i);
      else this.sc.draining.delete(i.id);
    }
    if (r.previous) {
      const prev = r.previous;
      Object.assign(svc, { image: prev.image, exposedPort: prev.exposedPort, healthPath: prev.healthPath, env: prev.env, gpuCount: prev.gpuCount });
      this.r.write(() => this.store.restoreSpec(svc.id, prev));
      this.r.notifyChanged(svc.teamId);
    }
    this.current = { state: 'rolled_back', from: r.from, to: r.to, updated: 0, total: r.total, message: `rolled back to revision ${r.from}: ${reason}` };
    return this.current.message;
  }

  private drop(i: ServiceInstance): void {
    this.r.drop(i);
    this.sc.draining.delete(i.id);
  }
}
