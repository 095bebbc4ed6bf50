/**
 * A container service's replicas as its actor (container.actor.ts) keeps them: the instances, when
 * each was placed, the commands to their agents (through each agent's actor, on whichever node holds
 * its stream), and the service's writes, in order, one after the other (a turn starts them and never
 * awaits them; the routing tables are told once the writes queued so far have landed).
 */
import type { ActorContext } from '../runtime/system.js';
import { AGENT_KIND, type CONTAINER_SERVICE_KIND } from '../../domain/tasks/record.js';
import type { ContainerChangesPort, ContainerStorePort, Protocols } from '../ports.js';
import type { ServiceInstance, ServiceRecord } from '../../domain/containers/schema.js';
import type { AuditNote } from '../../shared/audit.js';
import { containerStartOf } from '../../protocol/container-start.js';
import { specRevision } from './rollout.js';

type Ctx = ActorContext<Protocols, typeof CONTAINER_SERVICE_KIND>;

export class ServiceReplicas {
  readonly byId = new Map<string, ServiceInstance>();
  /** When each replica was placed (a new one's health timeout in a rollout counts from there). */
  readonly placedAt = new Map<string, number>();
  /** The audit note of the operation being applied: the first state write it causes carries it. */
  pendingAudit: AuditNote | null = null;
  private chain: Promise<void> = Promise.resolve();
  private notifySeq = 0;

  constructor(
    private readonly serviceId: string,
    private readonly ctx: Ctx,
    private readonly d: { store: ContainerStorePort; changes: ContainerChangesPort },
    private readonly service: () => ServiceRecord | null,
  ) {}

  /** Settles when every write queued so far has landed. */
  get writes(): Promise<void> {
    return this.chain;
  }

  /** Tells its agent to start the replica, on the spec as it is now. */
  start(i: ServiceInstance): void {
    const svc = this.service() as ServiceRecord;
    if (i.revision !== specRevision(svc)) {
      // a stopped replica started again (or a start re-sent) runs the spec as it is now
      i.revision = specRevision(svc);
      this.put(i);
    }
    this.ctx.system.tell({ kind: AGENT_KIND, id: i.agentId }, { type: 'server_msg', msg: { type: 'container', cmd: { op: 'start', ...containerStartOf(svc, i.id) } } });
  }

  /** Forgets an instance: its agent removes it (a later report of it is ignored), its row goes. */
  drop(i: ServiceInstance): void {
    this.command(i, 'remove');
    this.byId.delete(i.id);
    this.placedAt.delete(i.id);
    this.write(() => this.d.store.deleteInstance(i.id));
  }

  command(i: ServiceInstance, op: 'stop' | 'remove'): void {
    this.ctx.system.tell({ kind: AGENT_KIND, id: i.agentId }, { type: 'server_msg', msg: { type: 'container', cmd: { op, instanceId: i.id } } });
  }

  /** Writes the replica's row. */
  put(i: ServiceInstance): void {
    const svc = this.service() as ServiceRecord;
    const row = { id: i.id, serviceId: svc.id, teamId: svc.teamId, agentId: i.agentId, status: i.status, healthy: i.healthy, error: i.error, revision: i.revision ?? '' };
    this.write(() => this.d.store.putInstance(row));
    this.notifyChanged(svc.teamId);
  }

  takeAudit(): AuditNote | undefined {
    const a = this.pendingAudit ?? undefined;
    this.pendingAudit = null;
    return a;
  }

  /**
   * Every node's routing table is told once the writes queued so far have landed; a burst of writes
   * in one turn (a reconcile touching several instances) is one broadcast, sent after the last.
   */
  notifyChanged(teamId: string): void {
    const mine = ++this.notifySeq;
    this.write(async () => {
      if (mine === this.notifySeq) this.d.changes.changed(teamId);
    });
  }

  /** Writes run in order, one after the other; a failed write is logged (the next tick reconciles). */
  write(fn: () => Promise<void>): void {
    const p = this.chain.then(fn).catch((e: unknown) => this.ctx.log.error({ err: e, service_id: this.serviceId }, 'container service write failed'));
    this.chain = p;
    this.ctx.reenterAfter(p, () => undefined);
  }
}
