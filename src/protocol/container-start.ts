/**
 * Starting a container service instance, mapped once: the service definition (as the
 * container-service actor holds it) becomes a ContainerStart, which is the actors' message shape
 * and the agent's runtime spec; the agent wire (ContainerStart in agent.proto) carries it as
 * snake_case and is decoded back into the same shape on the agent.
 */
import type { ContainerStart as ContainerStartWire, ContainerStart__Output as ContainerStartWire__Output } from '../gen/gantry/agent/v1/ContainerStart.js';

/** One instance to start, on both ends of the wire (the agent's runtime spec too). */
export interface ContainerStart {
  /** Unique per placed replica (chosen by the server). */
  instanceId: string;
  serviceId: string;
  serviceSlug: string;
  /**
   * docker: an image reference (pulled when missing).
   * exec: the command to run: a JSON array of argv strings, or a command line split on whitespace.
   */
  image: string;
  /** docker: the in-container listening port (published on a free 127.0.0.1 port). exec: see PORT below. */
  exposedPort: number;
  /**
   * Environment of the process/container. exec also gets PORT=<a free local port the runtime
   * chose> (the process must listen on it; exposedPort is not used by exec).
   */
  env: Array<{ name: string; value: string }>;
  /** docker: bind mounts. exec: ignored. */
  volumes: Array<{ hostPath: string; containerPath: string }>;
  /** -1 all GPUs, 0 none, N that many (docker device requests; exec: CUDA_VISIBLE_DEVICES is not touched). */
  gpuCount: number;
  /** '' = no HTTP check (a TCP connect decides). */
  healthPath: string;
}

/** What a start needs of a service definition (the domain's ServiceRecord has it). */
export interface ContainerServiceDefinition {
  id: string;
  slug: string;
  image: string;
  exposedPort: number;
  healthPath: string;
  env: ReadonlyArray<{ env_name: string; env_value: string }>;
  volumes: ReadonlyArray<{ host_path: string; container_path: string }>;
  gpuCount: number;
}

/** The start of one instance of a service. */
export function containerStartOf(svc: ContainerServiceDefinition, instanceId: string): ContainerStart {
  return {
    instanceId,
    serviceId: svc.id,
    serviceSlug: svc.slug,
    image: svc.image,
    exposedPort: svc.exposedPort,
    env: svc.env.map((e) => ({ name: e.env_name, value: e.env_value })),
    volumes: svc.volumes.map((v) => ({ hostPath: v.host_path, containerPath: v.container_path })),
    gpuCount: svc.gpuCount,
    healthPath: svc.healthPath,
  };
}

/** The wire form (server side). */
export function encodeContainerStart(s: ContainerStart): ContainerStartWire {
  return {
    instance_id: s.instanceId,
    service_id: s.serviceId,
    service_slug: s.serviceSlug,
    image: s.image,
    exposed_port: s.exposedPort,
    env: s.env.map((e) => ({ name: e.name, value: e.value })),
    volumes: s.volumes.map((v) => ({ host_path: v.hostPath, container_path: v.containerPath })),
    gpu_count: s.gpuCount,
    health_path: s.healthPath,
  };
}

/** Back from the wire (agent side). */
export function decodeContainerStart(w: ContainerStartWire__Output): ContainerStart {
  return {
    instanceId: w.instance_id,
    serviceId: w.service_id,
    serviceSlug: w.service_slug,
    image: w.image,
    exposedPort: w.exposed_port,
    env: w.env.map((e) => ({ name: e.name, value: e.value })),
    volumes: w.volumes.map((v) => ({ hostPath: v.host_path, containerPath: v.container_path })),
    gpuCount: w.gpu_count,
    healthPath: w.health_path,
  };
}
