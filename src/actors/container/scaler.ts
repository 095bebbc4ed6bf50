/**
 * A container service's autoscaling state, kept by its actor (container.actor.ts): the gateways'
 * load reports, the samples over the cool-down / idle window, the replicas that should serve
 * (desired) and those draining, the cold start under way. The decision itself is the pure
 * `decideScale` (autoscale.ts); this applies it to the state and says which replicas to remove.
 */
import type { Autoscale, ServiceInstance, ServiceRecord } from '../../domain/containers/schema.js';
import { isLive } from './decide.js';
import { clusterLoad, decideScale, type LoadSample, type NodeLoad, type ScaleReplica } from './autoscale.js';

export interface ScaleSettings {
  intervalMs: number;
  cooldownMs: number;
  queueDelayMs: number;
}

export class ServiceScaler {
  readonly nodes = new Map<string, NodeLoad>();
  samples: LoadSample[] = [];
  desired = 0;
  observedSince = 0;
  lastScaleUpAt = 0;
  lastActiveAt = 0;
  /** Replica id -> since when it drains (no new requests; removed once idle). */
  readonly draining = new Map<string, number>();
  coldStartBegin: number | null = null;
  lastColdStart: { ms: number; at: number } | null = null;
  scaleError = '';

  reset(as: Autoscale | null, now: number): void {
    this.nodes.clear();
    this.samples = [];
    this.draining.clear();
    this.desired = as ? Math.max(as.minReplicas, 1) : 0;
    this.observedSince = now;
    this.lastScaleUpAt = now;
    this.lastActiveAt = 0;
    this.coldStartBegin = null;
    this.scaleError = '';
  }

  /** One load sample now: cluster-wide in flight and queued from the nodes' fresh reports. */
  sample(st: ScaleSettings, requests: number, queueDelayMs: number, extraQueued: number, now: number): void {
    const load = clusterLoad(this.nodes, now, st.intervalMs * 5);
    for (const [k, n] of this.nodes) if (now - n.at > st.intervalMs * 5) this.nodes.delete(k);
    const s: LoadSample = { at: now, inflight: load.inflight, queued: load.queued + extraQueued, queueDelayMs, requests };
    this.samples.push(s);
    if (s.inflight > 0 || s.queued > 0 || s.requests > 0) this.lastActiveAt = now;
    // the cool-down's window is kept; idleness is the last active instant
    const keep = st.cooldownMs + st.intervalMs * 2;
    let drop = 0;
    while (drop < this.samples.length && (this.samples[drop] as LoadSample).at < now - keep) drop++;
    if (drop) this.samples.splice(0, drop);
  }

  /** Applies the autoscaler's decision to the state: the count to serve, replicas to drain or bring back; returns those to remove. */
  scale(as: Autoscale, st: ScaleSettings, instances: Iterable<ServiceInstance>, now: number): { remove: string[]; reason: string | null } {
    const load = clusterLoad(this.nodes, now, st.intervalMs * 5);
    const replicas: ScaleReplica[] = [...instances]
      .filter(isLive)
      .map((i) => ({ id: i.id, ready: i.status === 'running' && i.healthy, drainingSince: this.draining.get(i.id) ?? null, inflight: load.perReplica.get(i.id) ?? 0 }));
    const dec = decideScale(
      this.samples,
      replicas,
      { minReplicas: as.minReplicas, maxReplicas: as.maxReplicas, targetInflight: as.targetInflight, idleTimeoutMs: as.idleTimeoutS * 1000, cooldownMs: st.cooldownMs, queueDelayMs: st.queueDelayMs, upWindowMs: st.intervalMs * 2, drainSettleMs: st.intervalMs * 2 },
      { observedSince: this.observedSince, lastScaleUpAt: this.lastScaleUpAt, lastActiveAt: this.lastActiveAt },
      now,
    );
    const before = replicas.filter((r) => r.drainingSince === null).length;
    if (dec.desired > before) {
      this.lastScaleUpAt = now;
      if (!replicas.some((r) => r.ready && r.drainingSince === null) && this.coldStartBegin === null && before === 0) this.coldStartBegin = now;
    }
    if (dec.desired === 0) this.coldStartBegin = null;
    this.desired = dec.desired;
    for (const id of dec.undrain) this.draining.delete(id);
    for (const id of dec.drain) this.draining.set(id, now);
    for (const id of dec.remove) this.draining.delete(id);
    if (this.desired === 0) this.scaleError = '';
    return { remove: dec.remove, reason: dec.reason || null };
  }

  /** Requests in flight per replica, from the nodes' fresh reports. */
  inflightPerReplica(st: ScaleSettings, now: number): ReadonlyMap<string, number> {
    return clusterLoad(this.nodes, now, st.intervalMs * 5).perReplica;
  }

  /** The first replica of a cold start became healthy: its duration in ms (null when none was under way). */
  coldStartEnded(now: number): number | null {
    if (this.coldStartBegin === null) return null;
    const ms = now - this.coldStartBegin;
    this.coldStartBegin = null;
    this.lastColdStart = { ms, at: now };
    return ms;
  }

  /** The autoscaling part of the written detail. */
  detail(): Partial<ServiceRecord['detail']> {
    return {
      desired: this.desired,
      draining: [...this.draining.keys()].sort(),
      ...(this.lastColdStart ? { lastColdStartMs: this.lastColdStart.ms, coldStartAt: this.lastColdStart.at } : {}),
      ...(this.scaleError ? { scaleError: this.scaleError } : {}),
    };
  }
}
