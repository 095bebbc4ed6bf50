/**
 * Pure parts of the container-service actor: where replicas go, and what the service's state is
 * given its instances. No I/O, no clock.
 */
import type { ServiceInstance, ServiceRecord, ServiceStatus } from '../../domain/containers/schema.js';

export interface PlacementCandidate {
  id: string;
  labels: string[];
  gpuCount: number;
  runtime: string;
}

/** Instances that hold (or will hold) a replica: placed and not failed, stopped or removed. */
export const isLive = (i: Pick<ServiceInstance, 'status'>): boolean => i.status === 'pending' || i.status === 'starting' || i.status === 'running';

/** GPUs an instance asks for on an agent with `agentGpus` GPUs (-1 = all of them). */
export const gpusWanted = (gpuCount: number, agentGpus: number): number => (gpuCount < 0 ? Math.max(agentGpus, 1) : gpuCount);

/**
 * Chooses agents for `need` more replicas of `svc`. Eligible: offers a container runtime, carries
 * every required label, and has enough free GPUs (the agent's GPUs minus those other live instances
 * of any service placed on it hold, `used`). Spread: agents with fewer replicas of this service
 * first (so 2 replicas on 2 agents land on both); then the least loaded; then by id for stability.
 * An agent may take a second replica of the same service only when no other eligible agent is
 * left and the service asks for no GPUs. Returns the chosen agent ids (possibly fewer than `need`)
 * and, when nothing fits, why.
 */
export function place(
  svc: Pick<ServiceRecord, 'requiredLabels' | 'gpuCount'>,
  need: number,
  agents: PlacementCandidate[],
  mine: Map<string, number>,
  used: Map<string, number>,
): { chosen: string[]; reason: string } {
  const chosen: string[] = [];
  const count = new Map(mine);
  const gpuUsed = new Map(used);
  const eligible = agents.filter((a) => a.runtime !== '' && svc.requiredLabels.every((l) => a.labels.includes(l)));
  if (eligible.length === 0) {
    const reason = agents.length === 0 ? 'no online agent of the team offers a container runtime' : `no online agent carries the required labels ${JSON.stringify(svc.requiredLabels)}`;
    return { chosen, reason };
  }
  for (let n = 0; n < need; n++) {
    const withGpus = eligible.filter((a) => fitsGpu(svc.gpuCount, a, gpuUsed));
    const fresh = withGpus.filter((a) => (count.get(a.id) ?? 0) === 0);
    const fits = fresh.length > 0 || svc.gpuCount !== 0 ? fresh : withGpus;
    if (fits.length === 0) break;
    fits.sort((a, b) => (count.get(a.id) ?? 0) - (count.get(b.id) ?? 0) || (gpuUsed.get(a.id) ?? 0) - (gpuUsed.get(b.id) ?? 0) || (a.id < b.id ? -1 : 1));
    const a = fits[0] as PlacementCandidate;
    chosen.push(a.id);
    count.set(a.id, (count.get(a.id) ?? 0) + 1);
    gpuUsed.set(a.id, (gpuUsed.get(a.id) ?? 0) + gpusWanted(svc.gpuCount, a.gpuCount));
  }
  const reason = chosen.length < need ? (svc.gpuCount !== 0 ? `not enough free GPUs on eligible agents for ${need - chosen.length} more replica(s) (gpu_count ${svc.gpuCount})` : `only ${chosen.length} of ${need} replica(s) could be placed`) : '';
  return { chosen, reason };
}

const fitsGpu = (gpuCount: number, a: PlacementCandidate, used: Map<string, number>): boolean => {
  const want = gpusWanted(gpuCount, a.gpuCount);
  return want === 0 || a.gpuCount - (used.get(a.id) ?? 0) >= want;
};

/**
 * The service's next status from its instances while it should run (status deploying or running):
 * running once a replica is healthy; a deploying service fails when nothing is live any more and
 * none could be placed; a running service stays running (0 healthy replicas = 503 at the gateway)
 * while the actor re-places.
 */
export function runningStatus(current: ServiceStatus, instances: ServiceInstance[], placementFailed: boolean): ServiceStatus {
  if (instances.some((i) => i.status === 'running' && i.healthy)) return 'running';
  if (current === 'deploying' && !instances.some(isLive) && (placementFailed || instances.length > 0)) return 'failed';
  return current;
}

/**
 * While the service should run, after instances changed: its next status, and which failed
 * replicas are replaced (removed from their agent, a new one placed after the backoff). A
 * deploying service all of whose placed replicas failed ends `failed` (docs/api.md), keeping the
 * failed replicas (their errors stay in instance_list) rather than re-placing them forever; a
 * running one replaces them and stays running. Decided on the instances before any is dropped.
 */
export function settleRun(current: ServiceStatus, instances: ServiceInstance[], placementFailed: boolean): { status: ServiceStatus; replace: string[] } {
  const status = runningStatus(current, instances, placementFailed);
  return { status, replace: status === 'failed' ? [] : instances.filter((i) => i.status === 'failed').map((i) => i.id) };
}

/** Replica counts for the service's deploy_status. */
export function detailOf(instances: ServiceInstance[], message: string): ServiceRecord['detail'] {
  return {
    placed: instances.filter(isLive).length,
    running: instances.filter((i) => i.status === 'running').length,
    healthy: instances.filter((i) => i.status === 'running' && i.healthy).length,
    message,
  };
}
