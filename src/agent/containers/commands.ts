/**
 * The server's container commands on the agent: decoded once by the agent-wire codec
 * (src/protocol/agent-wire.ts), run here against the ContainerManager; instance state goes back as
 * ContainerReport messages.
 */
import type { ContainerCommand } from '../../protocol/agent-wire.js';
import type { ContainerReport } from '../../gen/gantry/agent/v1/ContainerReport.js';
import type { ContainerManager } from './manager.js';
import type { InstanceReport } from './types.js';

/** An instance's state as the stream reports it. */
export const reportOf = (r: InstanceReport): ContainerReport => ({ instance_id: r.instanceId, service_id: r.serviceId, state: r.state, healthy: r.healthy, error: r.error });

/** Runs one command; an agent without a runtime answers a start with `failed` and a stop/remove with `removed`. */
export function runContainerCommand(containers: ContainerManager | null, cmd: ContainerCommand, report: (r: ContainerReport) => void): void {
  if (!containers) {
    const start = cmd.op === 'start';
    if (cmd.instanceId) report({ instance_id: cmd.instanceId, service_id: start ? cmd.serviceId : '', state: start ? 'failed' : 'removed', healthy: false, error: 'this agent runs no container runtime (--container-runtime none)' });
    return;
  }
  if (cmd.op === 'start') {
    const { op: _op, ...spec } = cmd;
    containers.start(spec);
  } else if (cmd.op === 'stop') containers.stop(cmd.instanceId);
  else containers.remove(cmd.instanceId);
}
