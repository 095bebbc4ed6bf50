/**
 * The agent's ContainerManager: drives a ContainerRuntime from the server's commands (start, stop,
 * remove), runs health checks on running instances and reports every state or health change.
 * Commands for one instance run one after the other (a stop that arrives while start is still
 * pulling waits for the start, then stops). Env values are never logged (they may be secrets).
 */
import type { Logger } from '../../shared/logger.js';
import { HealthChecker } from './health.js';
import type { ContainerRuntime, ContainerSpec, InstanceAddress, InstanceReport, InstanceState } from './types.js';

export interface ContainerManagerOptions {
  runtime: ContainerRuntime;
  /** Called on every state or health change of an instance. */
  report(r: InstanceReport): void;
  healthIntervalMs?: number; // default 5000
  healthTimeoutMs?: number; // default 2000
  unhealthyThreshold?: number; // default 2
  /** How long stop waits before SIGKILL (default: the runtime's). */
  stopTimeoutMs?: number;
  logger: Logger;
}

/** Log lines appended to a failure's error. */
const ERROR_LOG_LINES = 20;

type Wanted = 'running' | 'stopped' | 'removed';

interface Entry {
  spec: ContainerSpec;
  state: InstanceState;
  healthy: boolean;
  error: string;
  address: InstanceAddress | null;
  health: HealthChecker | null;
  /** What the last command asked for. */
  wanted: Wanted;
  /** A start is queued and has not begun yet. */
  startQueued: boolean;
  /** Tail of this instance's command queue. */
  queue: Promise<void>;
  /** Bumped on every start: exits and health changes of an older run are ignored. */
  run: number;
}

export class ContainerManager {
  private readonly runtime: ContainerRuntime;
  private readonly logger: Logger;
  private readonly healthIntervalMs: number;
  private readonly healthTimeoutMs: number;
  private readonly unhealthyThreshold: number;
  private readonly entries = new Map<string, Entry>();
  private closed = false;

  constructor(private readonly o: ContainerManagerOptions) {
    this.runtime = o.runtime;
    this.logger = o.logger;
    this.healthIntervalMs = o.healthIntervalMs ?? 5000;
    this.healthTimeoutMs = o.healthTimeoutMs ?? 2000;
    this.unhealthyThreshold = o.unhealthyThreshold ?? 2;
  }

  /** Idempotent per instanceId: a second start of a starting or running instance just re-reports it. */
  start(spec: ContainerSpec): void {
    if (this.closed) return;
    const cur = this.entries.get(spec.instanceId);
    if (cur && cur.wanted === 'running' && (cur.startQueued || cur.state === 'starting' || cur.state === 'running')) {
      this.emit(cur);
      return;
    }
    let e: Entry;
    if (cur && cur.wanted !== 'removed') {
      // stopped or failed: start it again
      e = cur;
      e.spec = spec;
      e.wanted = 'running';
    } else {
      // new, or a start after a remove: a fresh entry whose commands still run after the remove's
      e = { spec, state: 'starting', healthy: false, error: '', address: null, health: null, wanted: 'running', startQueued: false, queue: cur ? cur.queue : Promise.resolve(), run: 0 };
      this.entries.set(spec.instanceId, e);
      this.emit(e);
    }
    e.startQueued = true;
    this.enqueue(e, 'start', () => this.doStart(e));
  }

  /** Stops the instance (reports stopped). Unknown id: reports {state:'removed'}. */
  stop(instanceId: string): void {
    const e = this.entries.get(instanceId);
    if (!e) {
      this.reportUnknown(instanceId);
      return;
    }
    if (e.wanted === 'removed') return;
    e.wanted = 'stopped';
    this.enqueue(e, 'stop', () => this.doStop(e));
  }

  /** Stops if needed, removes, reports removed, forgets the instance. */
  remove(instanceId: string): void {
    const e = this.entries.get(instanceId);
    if (!e) {
      this.reportUnknown(instanceId);
      return;
    }
    if (e.wanted === 'removed') return;
    e.wanted = 'removed';
    this.enqueue(e, 'remove', async () => {
      await this.doStop(e, false);
      await this.runtime.remove(instanceId);
      this.set(e, 'removed', '');
      if (this.entries.get(instanceId) === e) this.entries.delete(instanceId);
    });
  }

  /** The running instance's local address (for the gateway tunnel), null when not running. */
  address(instanceId: string): InstanceAddress | null {
    const e = this.entries.get(instanceId);
    return e && e.state === 'running' ? e.address : null;
  }

  /** Current state of every known instance (sent in the agent's hello after a reconnect). */
  reports(): InstanceReport[] {
    return [...this.entries.values()].map((e) => this.toReport(e));
  }

  /** Adopts the runtime's existing instances (docker: containers from before an agent restart) and resumes health checks. */
  async adopt(): Promise<void> {
    const found = await this.runtime.list();
    for (const f of found) {
      if (this.entries.has(f.instanceId)) continue;
      const spec: ContainerSpec = {
        instanceId: f.instanceId,
        serviceId: f.serviceId,
        serviceSlug: '',
        image: '',
        exposedPort: 0,
        env: [],
        volumes: [],
        gpuCount: 0,
        healthPath: f.healthPath ?? '',
      };
      const e: Entry = {
        spec,
        state: f.running ? 'running' : 'stopped',
        healthy: false,
        error: '',
        address: f.running ? { instanceId: f.instanceId, host: f.host, port: f.port } : null,
        health: null,
        wanted: f.running ? 'running' : 'stopped',
        startQueued: false,
        queue: Promise.resolve(),
        run: 1,
      };
      this.entries.set(f.instanceId, e);
      this.logger.info({ instanceId: f.instanceId, serviceId: f.serviceId, running: f.running }, 'container manager: adopted instance');
      this.emit(e);
      if (e.address) {
        this.startHealth(e, e.address);
        const run = e.run;
        try {
          await this.runtime.watch?.(f.instanceId, (info) => {
            if (e.run !== run || e.wanted !== 'running' || this.closed) return;
            void this.onExited(e, run, info.code, info.error);
          });
        } catch (err) {
          this.logger.warn({ err, instanceId: f.instanceId }, 'container manager: cannot watch an adopted instance for exits (health checks still run)');
        }
      }
    }
  }

  /** Stops health checks and closes the runtime (exec stops its processes; docker leaves containers running). */
  async close(): Promise<void> {
    this.closed = true;
    for (const e of this.entries.values()) {
      e.run++;
      e.health?.stop();
      e.health = null;
    }
    await Promise.allSettled([...this.entries.values()].map((e) => e.queue));
    await this.runtime.close();
  }

  private enqueue(e: Entry, what: string, op: () => Promise<void>): void {
    e.queue = e.queue.then(op).catch((err: unknown) => {
      this.logger.error({ err, instanceId: e.spec.instanceId, op: what }, 'container manager: command failed');
    });
  }

  private async doStart(e: Entry): Promise<void> {
    e.startQueued = false;
    if (e.wanted !== 'running' || this.closed) return;
    const { spec } = e;
    if (e.state !== 'starting') this.set(e, 'starting', '');
    const run = ++e.run;
    // a restart: forget the previous run's bookkeeping first (docker: its container)
    if (run > 1) await this.runtime.remove(spec.instanceId).catch(() => undefined);
    let address: InstanceAddress;
    try {
      address = await this.runtime.start(spec, (info) => {
        if (e.run !== run || e.wanted !== 'running' || this.closed) return;
        void this.onExited(e, run, info.code, info.error);
      });
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      this.logger.warn({ instanceId: spec.instanceId, serviceId: spec.serviceId, runtime: this.runtime.name, error: msg }, 'container manager: instance failed to start');
      if (e.run !== run) return;
      this.set(e, 'failed', await this.withLogs(spec.instanceId, msg));
      return;
    }
    if (e.run !== run) return;
    e.address = address;
    this.set(e, 'running', '');
    if (this.closed) return;
    this.startHealth(e, address);
  }

  private async onExited(e: Entry, run: number, code: number | null, error: string | undefined): Promise<void> {
    e.health?.stop();
    e.health = null;
    e.address = null;
    const why = `instance exited${code === null ? '' : ` with code ${code}`}${error ? `: ${error}` : ''}`;
    this.logger.warn({ instanceId: e.spec.instanceId, code }, 'container manager: instance exited on its own');
    const msg = await this.withLogs(e.spec.instanceId, why);
    if (e.run !== run || e.wanted !== 'running') return;
    this.set(e, 'failed', msg);
  }

  private async doStop(e: Entry, report = true): Promise<void> {
    e.run++;
    e.health?.stop();
    e.health = null;
    e.address = null;
    if (e.state === 'starting' || e.state === 'running') {
      await this.runtime.stop(e.spec.instanceId, this.o.stopTimeoutMs);
    }
    if (report) this.set(e, 'stopped', '');
    else {
      e.state = 'stopped';
      e.healthy = false;
    }
  }

  private startHealth(e: Entry, address: InstanceAddress): void {
    const run = e.run;
    e.health?.stop();
    e.health = new HealthChecker({
      host: address.host,
      port: address.port,
      healthPath: e.spec.healthPath,
      intervalMs: this.healthIntervalMs,
      timeoutMs: this.healthTimeoutMs,
      unhealthyThreshold: this.unhealthyThreshold,
      onChange: (healthy) => {
        if (e.run !== run || e.state !== 'running') return;
        e.healthy = healthy;
        this.emit(e);
      },
    });
  }

  private async withLogs(instanceId: string, message: string): Promise<string> {
    let tail = '';
    try {
      tail = (await this.runtime.logs(instanceId, ERROR_LOG_LINES)).trimEnd();
    } catch {
      // no logs (unknown instance, runtime gone): the message alone
    }
    if (!tail || message.includes(tail)) return message;
    return `${message}\n${tail}`;
  }

  private set(e: Entry, state: InstanceState, error: string): void {
    e.state = state;
    e.error = error;
    if (state !== 'running') e.healthy = false;
    this.emit(e);
  }

  private toReport(e: Entry): InstanceReport {
    return { instanceId: e.spec.instanceId, serviceId: e.spec.serviceId, state: e.state, healthy: e.healthy, error: e.error };
  }

  private emit(e: Entry): void {
    this.send(this.toReport(e));
  }

  private reportUnknown(instanceId: string): void {
    this.send({ instanceId, serviceId: '', state: 'removed', healthy: false, error: '' });
  }

  private send(r: InstanceReport): void {
    try {
      this.o.report(r);
    } catch (err) {
      this.logger.error({ err, instanceId: r.instanceId }, 'container manager: report listener threw');
    }
  }
}
