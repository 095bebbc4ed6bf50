/**
 * Load balancing over a service's healthy instances, per node: least outstanding requests, round
 * robin among ties; an instance whose request failed at the tunnel (unreachable, reset, timed out)
 * is ejected for a while and comes back when the ejection lapses and its agent still reports it
 * healthy; each instance takes at most `maxInflight` concurrent requests.
 */
import type { ServiceInstance } from '../domain/containers/schema.js';
import { rendezvous, type Affinity } from './affinity.js';

interface InstanceState {
  inflight: number;
  ejectedUntil: number;
  failures: number;
}

export type PickResult = { ok: true; instance: ServiceInstance; release: (failed: boolean) => void } | { ok: false; reason: 'no_healthy_instance' | 'no_online_agent' | 'instances_busy' };

export interface BalancerOptions {
  maxInflight: number;
  /** First ejection; doubles with consecutive failures up to 8x. */
  ejectMs: number;
  now: () => number;
}

export class Balancer {
  private readonly state = new Map<string, InstanceState>();
  private readonly rr = new Map<string, number>();

  constructor(private readonly o: BalancerOptions) {}

  /** `affinity` (session affinity, src/gateway/affinity.ts): the pinned or hashed instance when it is usable and under its cap. */
  pick(serviceId: string, instances: ServiceInstance[], agentOnline: (agentId: string) => boolean, exclude?: ReadonlySet<string>, affinity?: Affinity | null): PickResult {
    const now = this.o.now();
    const healthy = instances.filter((i) => i.status === 'running' && i.healthy && !exclude?.has(i.id));
    if (healthy.length === 0) return { ok: false, reason: 'no_healthy_instance' };
    const reachable = healthy.filter((i) => agentOnline(i.agentId));
    if (reachable.length === 0) return { ok: false, reason: 'no_online_agent' };
    let candidates = reachable.filter((i) => (this.state.get(i.id)?.ejectedUntil ?? 0) <= now);
    // every reachable instance is ejected: try them anyway rather than fail outright (panic mode)
    if (candidates.length === 0) candidates = reachable;
    if (affinity) {
      const sticky = affinity.kind === 'instance' ? candidates.find((i) => i.id === affinity.instanceId) : rendezvous(affinity.key, candidates);
      if (sticky && (this.state.get(sticky.id)?.inflight ?? 0) < this.o.maxInflight) return this.take(sticky);
    }
    let best: ServiceInstance[] = [];
    let least = Infinity;
    for (const i of candidates) {
      const n = this.state.get(i.id)?.inflight ?? 0;
      if (n >= this.o.maxInflight) continue;
      if (n < least) {
        least = n;
        best = [i];
      } else if (n === least) best.push(i);
    }
    if (best.length === 0) return { ok: false, reason: 'instances_busy' };
    const turn = this.rr.get(serviceId) ?? 0;
    this.rr.set(serviceId, turn + 1);
    return this.take(best[turn % best.length] as ServiceInstance);
  }

  private take(chosen: ServiceInstance): PickResult {
    const st = this.stateOf(chosen.id);
    st.inflight++;
    let released = false;
    return {
      ok: true,
      instance: chosen,
      release: (failed) => {
        if (released) return;
        released = true;
        st.inflight--;
        if (failed) {
          st.failures++;
          st.ejectedUntil = this.o.now() + this.o.ejectMs * Math.min(8, 2 ** (st.failures - 1));
        } else st.failures = 0;
      },
    };
  }

  /** Outstanding requests per instance (metrics, tests). */
  inflight(instanceId: string): number {
    return this.state.get(instanceId)?.inflight ?? 0;
  }

  ejected(instanceId: string): boolean {
    return (this.state.get(instanceId)?.ejectedUntil ?? 0) > this.o.now();
  }

  private stateOf(id: string): InstanceState {
    let s = this.state.get(id);
    if (!s) this.state.set(id, (s = { inflight: 0, ejectedUntil: 0, failures: 0 }));
    return s;
  }
}
