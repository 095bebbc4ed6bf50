/**
 * The agent's container runtimes: what a service instance needs to run on this host, and the
 * interface every runtime (docker: Docker Engine API through dockerode; exec: a plain process)
 * implements. The ContainerManager (manager.ts) drives a runtime from the server's commands and
 * reports instance state and health on the agent's stream.
 */
import type { Logger } from '../../shared/logger.js';
import type { ContainerStart } from '../../protocol/container-start.js';

/** What an instance needs to run: the start command as the wire protocol defines it (src/protocol/container-start.ts). */
export type ContainerSpec = ContainerStart;

/** Where the instance is reachable from the agent (always loopback or a local address). */
export interface InstanceAddress {
  instanceId: string;
  host: string;
  port: number;
}

export interface ExitInfo {
  /** Exit code when known. */
  code: number | null;
  error?: string;
}

export interface ContainerRuntime {
  readonly name: 'docker' | 'exec';
  /**
   * Pulls (docker) / spawns and starts the instance; resolves with its local address once started
   * (not necessarily healthy). onExit is called once if the instance stops on its own afterwards.
   */
  start(spec: ContainerSpec, onExit: (info: ExitInfo) => void): Promise<InstanceAddress>;
  /** Stops the instance (SIGTERM, then SIGKILL after timeoutMs); resolves when it has stopped. No-op when unknown. */
  stop(instanceId: string, timeoutMs?: number): Promise<void>;
  /** Removes a stopped instance (docker: the container; exec: its bookkeeping). No-op when unknown. */
  remove(instanceId: string): Promise<void>;
  /** The last lines of the instance's output (stdout and stderr interleaved). */
  logs(instanceId: string, tailLines: number): Promise<string>;
  /** Instances this runtime knows now (docker: containers labelled gantry.instance_id, including ones from before an agent restart). */
  list(): Promise<Array<InstanceAddress & { serviceId: string; running: boolean; /** The health path it was started with, when the runtime knows it (docker: a label). */ healthPath?: string }>>;
  /**
   * Optional: watches an instance this runtime did not start in this process (docker: a container
   * found by list() after an agent restart) and calls onExit once if it stops on its own. No-op when
   * it is unknown or not running.
   */
  watch?(instanceId: string, onExit: (info: ExitInfo) => void): Promise<void>;
  /** Releases runtime resources. exec stops its processes; docker leaves containers running. */
  close(): Promise<void>;
}

export type InstanceState = 'starting' | 'running' | 'stopped' | 'failed' | 'removed';

/** What the agent reports about an instance (on every change, and all of them in hello). */
export interface InstanceReport {
  instanceId: string;
  serviceId: string;
  state: InstanceState;
  healthy: boolean;
  /** Why it failed (runtime error or exit, with the last log lines), '' otherwise. */
  error: string;
}

export interface RuntimeOptions {
  logger: Logger;
}
