/**
 * Rolling updates of a running container service (pure: no I/O, no clock). A change of the spec
 * its replicas run (image, env, port, health path, GPUs: specRevision) rolls them one at a time:
 * one replica of the new revision is started (a surge of one over the wanted count); once it is
 * healthy one old replica is drained (the gateway sends it no new request) and removed when it has
 * no request in flight; repeat until every replica runs the new revision. A new replica that fails,
 * or is not healthy within the health timeout, stops the rollout: the actor rolls back.
 */
import { createHash } from 'node:crypto';
import type { InstanceState, ServiceRecord } from '../../domain/containers/schema.js';

/** The part of a definition a replica runs: a change of it is rolled out. */
export type RolloutSpec = Pick<ServiceRecord, 'image' | 'exposedPort' | 'healthPath' | 'env' | 'gpuCount'>;

export const specOf = (s: RolloutSpec): RolloutSpec => ({ image: s.image, exposedPort: s.exposedPort, healthPath: s.healthPath, env: s.env.map((e) => ({ env_name: e.env_name, env_value: e.env_value })), gpuCount: s.gpuCount });

/** The spec's revision: a short hash of what a replica runs (the same spec, the same revision). */
export function specRevision(s: RolloutSpec): string {
  const text = JSON.stringify([s.image, s.exposedPort, s.healthPath, s.env.map((e) => [e.env_name, e.env_value]), s.gpuCount]);
  return createHash('sha256').update(text).digest('hex').slice(0, 12);
}

export interface RolloutReplica {
  id: string;
  /** The revision it was started with ('' = unknown: placed before revisions were recorded). */
  revision: string;
  status: InstanceState;
  healthy: boolean;
  error: string;
  /** When it was placed (the health timeout counts from there). */
  placedAt: number;
  /** Set while draining: since when. */
  drainingSince: number | null;
  /** Requests in flight on it, cluster-wide. */
  inflight: number;
}

export interface RolloutSettings {
  /** A new replica not healthy this long after its placement fails the rollout. */
  healthTimeoutMs: number;
  /** A draining replica is not removed before this long (every node's routing table has it as draining). */
  drainSettleMs: number;
}

export interface RolloutDecision {
  /** Start one more replica of the new revision (a surge of one). */
  start: boolean;
  /** Old replicas to drain now. */
  drain: string[];
  /** Drained old replicas with nothing in flight: remove. */
  remove: string[];
  /** Every replica runs the new revision and is healthy. */
  completed: boolean;
  /** Non-empty: the rollout fails (roll back), with why. */
  rollback: string;
  /** Healthy replicas of the new revision. */
  updated: number;
}

const live = (s: InstanceState): boolean => s === 'pending' || s === 'starting' || s === 'running';

/**
 * One step of a rollout to revision `to` with `wanted` replicas serving. Old replicas keep serving
 * until a new one is healthy to take their place; at most one new replica is starting at a time.
 */
export function decideRollout(replicas: readonly RolloutReplica[], to: string, wanted: number, st: RolloutSettings, now: number): RolloutDecision {
  const out: RolloutDecision = { start: false, drain: [], remove: [], completed: false, rollback: '', updated: 0 };
  const fresh = replicas.filter((r) => r.revision === to);
  const old = replicas.filter((r) => r.revision !== to && live(r.status));
  const failed = fresh.find((r) => r.status === 'failed' || r.status === 'stopped');
  if (failed) {
    out.rollback = `new replica ${failed.id.slice(0, 8)} failed: ${(failed.error.split('\n')[0] ?? '').slice(0, 300) || failed.status}`;
    return out;
  }
  const freshLive = fresh.filter((r) => live(r.status));
  const ready = freshLive.filter((r) => r.status === 'running' && r.healthy);
  out.updated = ready.length;
  const late = freshLive.find((r) => !(r.status === 'running' && r.healthy) && now - r.placedAt >= st.healthTimeoutMs);
  if (late) {
    out.rollback = `new replica ${late.id.slice(0, 8)} was not healthy within ${Math.round(st.healthTimeoutMs / 1000)} s${late.error ? `: ${(late.error.split('\n')[0] ?? '').slice(0, 300)}` : ''}`;
    return out;
  }
  out.remove = old.filter((r) => r.drainingSince !== null && r.inflight === 0 && now - r.drainingSince >= st.drainSettleMs).map((r) => r.id);
  const oldServing = old.filter((r) => r.drainingSince === null);
  if (oldServing.length === 0 && old.length === out.remove.length && ready.length >= Math.min(wanted, freshLive.length) && ready.length === freshLive.length) {
    out.completed = true;
    return out;
  }
  // a new replica is starting: wait for it (healthy, or the timeout)
  if (ready.length < freshLive.length) return out;
  if (oldServing.length > 0 && oldServing.length + ready.length > wanted) {
    // a healthy new replica can take an old one's place: drain the old one serving least
    const pick = [...oldServing].sort((a, b) => Number(a.status === 'running' && a.healthy) - Number(b.status === 'running' && b.healthy) || a.inflight - b.inflight || (a.id < b.id ? -1 : 1))[0];
    if (pick) out.drain.push(pick.id);
    return out;
  }
  if (oldServing.length > 0 && freshLive.length < wanted) out.start = true;
  return out;
}
