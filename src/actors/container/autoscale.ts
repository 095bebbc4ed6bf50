/**
 * Autoscaling of a container service (docs/api.md "Autoscaling"): pure decisions over the load the
 * gateway nodes report (cluster-wide in-flight requests, requests queued and how long they
 * waited), the service's replicas and its settings, at a given instant. No I/O, no clock: the
 * container-service actor (one per service in the cluster) keeps the samples and applies the
 * decision (places replicas, marks replicas draining, removes drained ones).
 *
 * - Up at once: to ceil((in flight + queued) / target) replicas, and one more when requests
 *   waited in the gateway's queue longer than the threshold while no replica is starting.
 * - Down only after the cool-down: to the largest need seen over the whole cool-down window, with
 *   no scale-up inside it; with min_replicas 0 to zero after idle_timeout without any request.
 * - Never removes a replica that has requests in flight: a replica to go is first drained (the
 *   gateways stop routing new requests to it) and removed once its in-flight count, summed over
 *   every node, is 0 and the drain had time to reach every node. Draining prefers replicas that
 *   serve nothing (not ready, then fewest in flight); a drained replica comes back if load returns.
 */

export interface ScaleSettings {
  minReplicas: number;
  maxReplicas: number;
  targetInflight: number;
  idleTimeoutMs: number;
  /** Load must stay lower for this long before replicas go. */
  cooldownMs: number;
  /** Requests that waited in the gateway's queue at least this long add a replica. */
  queueDelayMs: number;
  /** A scale-up looks at the samples of this last window (a couple of report intervals). */
  upWindowMs: number;
  /** A draining replica is not removed before this long (every node's routing table has it as draining). */
  drainSettleMs: number;
}

/** The service's load at one instant, summed over the gateway nodes. */
export interface LoadSample {
  at: number;
  inflight: number;
  queued: number;
  /** Longest wait in a gateway's queue reported since the previous sample. */
  queueDelayMs: number;
  /** Requests that started since the previous sample. */
  requests: number;
}

export interface ScaleReplica {
  id: string;
  /** Running and healthy: it can take requests. */
  ready: boolean;
  /** Set while draining: since when. */
  drainingSince: number | null;
  /** Requests in flight on it, over every node. */
  inflight: number;
}

export interface ScaleHistory {
  /** Since when the samples cover the service's load (the actor's activation or the last deploy). */
  observedSince: number;
  lastScaleUpAt: number;
  /** The last sample with a request started, in flight or queued (0: none seen; the samples kept may be shorter than the idle timeout). */
  lastActiveAt: number;
}

export interface ScaleDecision {
  /** Replicas that should serve (not draining). */
  desired: number;
  /** Serving replicas to drain now. */
  drain: string[];
  /** Draining replicas to serve again (cheaper than placing new ones). */
  undrain: string[];
  /** Draining replicas to remove now (none has a request in flight). */
  remove: string[];
  /** Why (for the service's deploy_status message), '' when nothing changes. */
  reason: string;
}

const need = (s: LoadSample, target: number): number => Math.ceil((s.inflight + s.queued) / target);
const clamp = (n: number, st: ScaleSettings): number => Math.min(st.maxReplicas, Math.max(st.minReplicas, n));

export function decideScale(samples: readonly LoadSample[], replicas: readonly ScaleReplica[], st: ScaleSettings, h: ScaleHistory, now: number): ScaleDecision {
  const serving = replicas.filter((r) => r.drainingSince === null);
  const draining = replicas.filter((r) => r.drainingSince !== null);
  const active = serving.length;
  const starting = serving.filter((r) => !r.ready).length;
  const recent = samples.filter((s) => s.at > now - st.upWindowMs && s.at <= now);
  const latest = samples.length ? (samples[samples.length - 1] as LoadSample) : null;

  // up: the current need, plus one when requests waited too long and nothing is on its way
  let up = latest ? need(latest, st.targetInflight) : 0;
  for (const s of recent) up = Math.max(up, need(s, st.targetInflight));
  const waited = recent.some((s) => s.queueDelayMs >= st.queueDelayMs);
  let reason = '';
  if (waited && starting === 0) up = Math.max(up, active + 1);
  // a request held while nothing serves (scaled to zero) needs one replica
  if (recent.some((s) => s.queued > 0 || s.requests > 0)) up = Math.max(up, 1);
  up = clamp(up, st);

  let desired = active;
  if (up > active) {
    desired = up;
    reason = active === 0 ? 'scaling up from zero' : waited && up === active + 1 ? `scaling up to ${up}: requests waited in the gateway's queue` : `scaling up to ${up}: ${latest?.inflight ?? 0} request(s) in flight`;
  } else {
    // down: only when the window behind covers the whole cool-down and no scale-up happened in it
    const window = samples.filter((s) => s.at > now - st.cooldownMs && s.at <= now);
    // and no request waited in a queue during it (the replicas were not enough then)
    const covered = now - h.observedSince >= st.cooldownMs && now - h.lastScaleUpAt >= st.cooldownMs && !window.some((s) => s.queued > 0 || s.queueDelayMs >= st.queueDelayMs);
    let down = 0;
    for (const s of window) down = Math.max(down, need(s, st.targetInflight));
    if (st.minReplicas === 0) {
      let lastActive = Math.max(h.observedSince, h.lastActiveAt);
      for (const s of samples) if (s.inflight > 0 || s.queued > 0 || s.requests > 0) lastActive = Math.max(lastActive, s.at);
      const busyNow = replicas.some((r) => r.inflight > 0);
      if (now - lastActive < st.idleTimeoutMs || busyNow) down = Math.max(down, 1);
    }
    down = clamp(down, st);
    if (active > st.maxReplicas) {
      // max_replicas was lowered: no cool-down for a setting
      desired = st.maxReplicas;
      reason = `scaling down to max_replicas ${st.maxReplicas}`;
    } else if (covered && down < active) {
      desired = down;
      reason = down === 0 ? 'scaled to zero: idle' : `scaling down to ${down} after the cool-down`;
    }
  }

  const drain: string[] = [];
  const undrain: string[] = [];
  if (desired > active) {
    // bring back draining replicas first (ready ones, most in flight: they are warm)
    const back = [...draining].sort((a, b) => Number(b.ready) - Number(a.ready) || b.inflight - a.inflight || (a.id < b.id ? -1 : 1));
    for (const r of back.slice(0, desired - active)) undrain.push(r.id);
  } else if (desired < active) {
    // drain the ones that serve the least: not ready first, then fewest in flight, then newest
    const order = [...serving].sort((a, b) => Number(a.ready) - Number(b.ready) || a.inflight - b.inflight || (a.id < b.id ? 1 : -1));
    for (const r of order.slice(0, active - desired)) drain.push(r.id);
  }
  const remove = draining.filter((r) => !undrain.includes(r.id) && r.inflight === 0 && now - (r.drainingSince as number) >= st.drainSettleMs).map((r) => r.id);
  return { desired, drain, undrain, remove, reason };
}

/** A node's last load report as the actor keeps it. */
export interface NodeLoad {
  at: number;
  instances: ReadonlyMap<string, number>;
  queued: number;
}

/** Cluster-wide in-flight per replica and queued requests from the nodes' reports still fresh at `now`. */
export function clusterLoad(nodes: ReadonlyMap<string, NodeLoad>, now: number, staleMs: number): { perReplica: Map<string, number>; inflight: number; queued: number } {
  const perReplica = new Map<string, number>();
  let inflight = 0;
  let queued = 0;
  for (const n of nodes.values()) {
    if (now - n.at > staleMs) continue;
    queued += n.queued;
    for (const [id, c] of n.instances) {
      perReplica.set(id, (perReplica.get(id) ?? 0) + c);
      inflight += c;
    }
  }
  return { perReplica, inflight, queued };
}
