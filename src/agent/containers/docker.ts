/**
 * The docker runtime: a container service instance is a Docker container, driven through the
 * Docker Engine API (dockerode). The image is pulled when missing; the container is named
 * gantry-<slug>-<instance id prefix>, labelled with the instance and service, and publishes its
 * exposed port on a free 127.0.0.1 port. Containers outlive the agent: close() leaves them running
 * and list() finds them again (by the gantry.instance_id label) after a restart.
 */
import Dockerode from 'dockerode';
import type { Logger } from '../../shared/logger.js';
import type { ContainerRuntime, ContainerSpec, ExitInfo, InstanceAddress, RuntimeOptions } from './types.js';

export interface DockerRuntimeOptions extends RuntimeOptions {
  /** Engine socket (default /var/run/docker.sock). */
  socketPath?: string;
  /** Engine over TCP (tests): host and port. */
  host?: string;
  port?: number;
  /** A prebuilt client (wins over socketPath/host). */
  docker?: Dockerode;
}

export const LABEL_INSTANCE = 'gantry.instance_id';
export const LABEL_SERVICE = 'gantry.service_id';
export const LABEL_SLUG = 'gantry.service_slug';
/** Not needed by the engine: lets an agent that restarted resume the same health checks. */
export const LABEL_HEALTH_PATH = 'gantry.health_path';

const HOST = '127.0.0.1';

/** An engine error's HTTP status (docker-modem sets statusCode on its errors). */
function statusOf(e: unknown): number | undefined {
  return typeof e === 'object' && e !== null && typeof (e as { statusCode?: unknown }).statusCode === 'number' ? (e as { statusCode: number }).statusCode : undefined;
}

function errMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * The daemon's own words for a failed Engine API call: docker-modem's message is
 * "(HTTP code 500) server error - <the daemon's message> "; this keeps the daemon's message.
 */
export function daemonReason(e: unknown): string {
  return errMessage(e).replace(/^\(HTTP code \d+\) [^-]*- /, '').trim();
}

/**
 * The container name for an instance: gantry-<slug>-<instance id>, docker-safe. The whole id: its
 * first 8 characters are a UUIDv7's clock bits, shared by replicas placed in the same minute (the
 * daemon refuses a second container of the same name: 409 Conflict).
 */
export function containerName(spec: Pick<ContainerSpec, 'serviceSlug' | 'instanceId'>): string {
  const clean = (s: string) => s.replace(/[^a-zA-Z0-9_.-]+/g, '-').replace(/^[^a-zA-Z0-9]+/, '');
  const slug = clean(spec.serviceSlug).replace(/[-_.]+$/, '') || 'service';
  return `gantry-${slug}-${clean(spec.instanceId) || 'x'}`;
}

/** GPU device requests: -1 all, N > 0 that many, 0 none. */
export function deviceRequests(gpuCount: number): Dockerode.DeviceRequest[] {
  if (gpuCount === 0) return [];
  return [{ Driver: 'nvidia', Count: gpuCount < 0 ? -1 : gpuCount, Capabilities: [['gpu']] }];
}

/**
 * Splits the Engine API's multiplexed log stream (frames of an 8-byte header: stream type byte,
 * 3 zero bytes, big-endian uint32 length, then the payload) into text; a non-multiplexed (TTY)
 * stream is returned as it is.
 */
export function demuxLogs(buf: Buffer): string {
  const out: Buffer[] = [];
  let i = 0;
  while (i + 8 <= buf.length) {
    const type = buf[i];
    if ((type !== 0 && type !== 1 && type !== 2) || buf[i + 1] !== 0 || buf[i + 2] !== 0 || buf[i + 3] !== 0) {
      if (i === 0) return buf.toString('utf8');
      break;
    }
    const len = buf.readUInt32BE(i + 4);
    out.push(buf.subarray(i + 8, Math.min(buf.length, i + 8 + len)));
    i += 8 + len;
  }
  if (i === 0 && buf.length > 0 && buf.length < 8) return buf.toString('utf8');
  return Buffer.concat(out).toString('utf8');
}

interface Tracked {
  containerId: string;
  stopping: boolean;
  /** Aborts the pending wait request (close, remove). */
  abort: AbortController;
  /** Set once a wait request is pending: who hears the exit (the latest caller: one wait per container). */
  onExit?: (info: ExitInfo) => void;
}

export class DockerRuntime implements ContainerRuntime {
  readonly name = 'docker' as const;
  readonly docker: Dockerode;
  private readonly logger: Logger;
  private readonly tracked = new Map<string, Tracked>();

  constructor(o: DockerRuntimeOptions) {
    this.logger = o.logger;
    this.docker = o.docker ?? (o.host ? new Dockerode({ host: o.host, port: o.port ?? 2375, protocol: 'http' }) : new Dockerode({ socketPath: o.socketPath ?? '/var/run/docker.sock' }));
  }

  async start(spec: ContainerSpec, onExit: (info: ExitInfo) => void): Promise<InstanceAddress> {
    const log = { instanceId: spec.instanceId, serviceId: spec.serviceId, image: spec.image };
    const existing = await this.find(spec.instanceId);
    if (existing) {
      if (existing.State === 'running') {
        this.logger.info({ ...log, containerId: existing.Id }, 'docker runtime: instance already running, reusing its container');
        const address = await this.addressOf(existing.Id, spec);
        this.watchContainer(spec.instanceId, existing.Id, onExit);
        return address;
      }
      await this.docker.getContainer(existing.Id).remove({ force: true }).catch((e: unknown) => {
        if (statusOf(e) !== 404) throw e;
      });
    }
    await this.ensureImage(spec.image, log);
    const port = `${spec.exposedPort}/tcp`;
    const labels: Record<string, string> = { [LABEL_INSTANCE]: spec.instanceId, [LABEL_SERVICE]: spec.serviceId, [LABEL_SLUG]: spec.serviceSlug, [LABEL_HEALTH_PATH]: spec.healthPath };
    const hostConfig: Dockerode.HostConfig = {
      PortBindings: { [port]: [{ HostIp: HOST, HostPort: '' }] },
      Binds: spec.volumes.map((v) => `${v.hostPath}:${v.containerPath}`),
      RestartPolicy: { Name: 'no' },
    };
    const gpus = deviceRequests(spec.gpuCount);
    if (gpus.length) hostConfig.DeviceRequests = gpus;
    const name = containerName(spec);
    // env values may be secrets: log the names only
    this.logger.info({ ...log, name, env: spec.env.map((e) => e.name), gpuCount: spec.gpuCount }, 'docker runtime: creating container');
    let container: Dockerode.Container;
    try {
      container = await this.docker.createContainer({
        name,
        Image: spec.image,
        Env: spec.env.map((e) => `${e.name}=${e.value}`),
        Labels: labels,
        ExposedPorts: { [port]: {} },
        HostConfig: hostConfig,
      });
    } catch (e) {
      throw new Error(`the daemon could not create the container of ${spec.image}: ${daemonReason(e)}`);
    }
    const t: Tracked = { containerId: container.id, stopping: false, abort: new AbortController() };
    this.tracked.set(spec.instanceId, t);
    try {
      await container.start();
    } catch (e) {
      // e.g. a GPU device request on a host without the nvidia runtime: the daemon's reason, with the image
      throw new Error(`the daemon could not start the container of ${spec.image}: ${daemonReason(e)}`);
    }
    const address = await this.addressOf(container.id, spec);
    this.watchContainer(spec.instanceId, container.id, onExit, t);
    return address;
  }

  async stop(instanceId: string, timeoutMs = 10_000): Promise<void> {
    const id = await this.containerId(instanceId);
    if (!id) return;
    const t = this.tracked.get(instanceId);
    if (t) t.stopping = true;
    try {
      await this.docker.getContainer(id).stop({ t: Math.max(0, Math.ceil(timeoutMs / 1000)) });
    } catch (e) {
      const code = statusOf(e);
      if (code !== 304 && code !== 404) throw e;
    }
  }

  async remove(instanceId: string): Promise<void> {
    const id = await this.containerId(instanceId);
    const t = this.tracked.get(instanceId);
    if (t) {
      t.stopping = true;
      t.abort.abort();
      this.tracked.delete(instanceId);
    }
    if (!id) return;
    try {
      await this.docker.getContainer(id).remove({ force: true });
    } catch (e) {
      if (statusOf(e) !== 404) throw e;
    }
  }

  async logs(instanceId: string, tailLines: number): Promise<string> {
    const id = await this.containerId(instanceId);
    if (!id || tailLines <= 0) return '';
    try {
      const buf = await this.docker.getContainer(id).logs({ stdout: true, stderr: true, tail: tailLines, follow: false });
      return demuxLogs(Buffer.isBuffer(buf) ? buf : Buffer.from(String(buf))).trimEnd();
    } catch (e) {
      if (statusOf(e) === 404) return '';
      throw e;
    }
  }

  async list(): Promise<Array<InstanceAddress & { serviceId: string; running: boolean; healthPath?: string }>> {
    const all = await this.docker.listContainers({ all: true, filters: { label: [LABEL_INSTANCE] } });
    const out: Array<InstanceAddress & { serviceId: string; running: boolean; healthPath?: string }> = [];
    for (const c of all) {
      const instanceId = c.Labels?.[LABEL_INSTANCE];
      if (!instanceId) continue;
      const published = (c.Ports ?? []).filter((p) => p.Type === 'tcp' && p.PublicPort);
      const p = published.find((x) => x.IP === HOST) ?? published[0];
      const item: InstanceAddress & { serviceId: string; running: boolean; healthPath?: string } = {
        instanceId,
        host: HOST,
        port: p?.PublicPort ?? 0,
        serviceId: c.Labels[LABEL_SERVICE] ?? '',
        running: c.State === 'running',
      };
      const hp = c.Labels[LABEL_HEALTH_PATH];
      if (hp !== undefined) item.healthPath = hp;
      out.push(item);
    }
    return out;
  }

  /** Watches a container found after an agent restart: onExit once when it stops on its own. */
  async watch(instanceId: string, onExit: (info: ExitInfo) => void): Promise<void> {
    const c = await this.find(instanceId);
    if (!c || c.State !== 'running') return;
    // already watched: onExit takes over the pending wait
    this.watchContainer(instanceId, c.Id, onExit);
  }

  /** Containers keep running across agent restarts: only the pending wait requests are dropped. */
  async close(): Promise<void> {
    for (const t of this.tracked.values()) t.abort.abort();
    this.tracked.clear();
  }

  private async ensureImage(image: string, log: Record<string, unknown>): Promise<void> {
    try {
      await this.docker.getImage(image).inspect();
      return;
    } catch (e) {
      if (statusOf(e) !== 404) throw e;
    }
    this.logger.info(log, 'docker runtime: pulling image');
    // the daemon's reason alone may name only the registry (`Get "https://registry-1.docker.io/v2/":
    // ... no such host`): the message names the image first
    const failed = (why: string) => new Error(`image ${image} is not on this host and could not be pulled: ${why}`);
    let stream: NodeJS.ReadableStream;
    try {
      stream = (await this.docker.pull(image)) as NodeJS.ReadableStream;
    } catch (e) {
      throw failed(daemonReason(e));
    }
    await new Promise<void>((resolve, reject) => {
      this.docker.modem.followProgress(stream, (err: Error | null, output: Array<{ error?: string; errorDetail?: { message?: string } }>) => {
        if (err) return reject(failed(daemonReason(err)));
        const bad = output.find((o) => o.error || o.errorDetail);
        if (bad) return reject(failed(bad.errorDetail?.message ?? bad.error ?? 'the pull stream reported an error'));
        resolve();
      });
    });
    this.logger.info(log, 'docker runtime: pulled image');
  }

  private async addressOf(containerId: string, spec: ContainerSpec): Promise<InstanceAddress> {
    const info = await this.docker.getContainer(containerId).inspect();
    const bindings = info.NetworkSettings?.Ports?.[`${spec.exposedPort}/tcp`];
    const b = bindings?.find((x) => x.HostIp === HOST) ?? bindings?.[0];
    const port = b ? Number(b.HostPort) : NaN;
    if (info.State && !info.State.Running) {
      // it exited before it could be inspected (a crash at start): the exit code, the manager adds its logs
      throw new Error(`the container of ${spec.image} exited at start with code ${info.State.ExitCode}${info.State.Error ? `: ${info.State.Error}` : ''}`);
    }
    if (!Number.isInteger(port) || port <= 0) {
      throw new Error(`container ${containerId.slice(0, 12)} has no published port for ${spec.exposedPort}/tcp (state ${info.State?.Status ?? 'unknown'})`);
    }
    return { instanceId: spec.instanceId, host: HOST, port };
  }

  /** Waits for the container to stop (POST /containers/{id}/wait) and reports an exit nobody asked for. */
  private watchContainer(instanceId: string, containerId: string, onExit: (info: ExitInfo) => void, tracked?: Tracked): void {
    let t = tracked ?? this.tracked.get(instanceId);
    if (!t || t.containerId !== containerId) {
      t = { containerId, stopping: false, abort: new AbortController() };
      this.tracked.set(instanceId, t);
    }
    const me = t;
    if (me.onExit) {
      me.onExit = onExit;
      return;
    }
    me.onExit = onExit;
    const fire = (info: ExitInfo) => {
      if (me.stopping || this.tracked.get(instanceId) !== me) return;
      me.stopping = true; // once
      this.logger.warn({ instanceId, containerId, code: info.code }, 'docker runtime: container exited on its own');
      try {
        me.onExit?.(info);
      } catch (err) {
        this.logger.error({ err, instanceId }, 'docker runtime: onExit threw');
      }
    };
    this.docker
      .getContainer(containerId)
      .wait({ condition: 'not-running', abortSignal: me.abort.signal })
      .then((res: { StatusCode?: number; Error?: { Message?: string } | null }) => {
        const info: ExitInfo = { code: typeof res?.StatusCode === 'number' ? res.StatusCode : null };
        if (res?.Error?.Message) info.error = res.Error.Message;
        fire(info);
      })
      .catch((e: unknown) => {
        if (me.abort.signal.aborted) return;
        fire({ code: null, error: `lost track of the container: ${errMessage(e)}` });
      });
  }

  private async find(instanceId: string): Promise<Dockerode.ContainerInfo | undefined> {
    const found = await this.docker.listContainers({ all: true, filters: { label: [`${LABEL_INSTANCE}=${instanceId}`] } });
    return found[0];
  }

  private async containerId(instanceId: string): Promise<string | undefined> {
    const t = this.tracked.get(instanceId);
    if (t) return t.containerId;
    return (await this.find(instanceId))?.Id;
  }
}
