/**
 * `gantry agent`: configuration (flags and GANTRY_AGENT_* env), discovery, the stream client and
 * the task runner put together. startAgent() is also what the benchmark runs in-process.
 */
import os from 'node:os';
import path from 'node:path';
import type { Logger } from '../shared/logger.js';
import { AgentClient } from './client.js';
import { AgentRunner, type RunnerOptions } from './runner.js';
import { CpuMeter, resolveMachineId, sampleGpus, scanModels, type GpuInfo, type GpuSample, type ModelEntry } from './discovery.js';
import { customNodeInventory, ModelSyncer } from './sync.js';
import { NerfstudioExecutor, createExecutor, type Executor, type ExecutorConfig } from './executors/index.js';
import type { SyncManifest__Output } from '../gen/gantry/agent/v1/SyncManifest.js';
import { ContainerManager } from './containers/manager.js';
import { DockerRuntime } from './containers/docker.js';
import { ExecRuntime } from './containers/exec.js';
import type { ContainerRuntime } from './containers/types.js';
import { reportOf, runContainerCommand } from './containers/commands.js';
import type { Heartbeat } from '../gen/gantry/agent/v1/Heartbeat.js';
import type { ContainerReport } from '../gen/gantry/agent/v1/ContainerReport.js';
import type { TunnelFrame } from '../gen/gantry/agent/v1/TunnelFrame.js';
import { AgentTunnel, type TunnelTarget } from './tunnel.js';
import { ComfyRuntime } from './comfy-supervisor.js';
import { readExtraModelPaths, scanComfyModels, type ExtraModelDir } from './comfy-models.js';

export const AGENT_VERSION = '0.1.0';
import type { AgentConfig } from './config.js';
export { AGENT_FLAGS, UsageError, agentUsage, parseAgentArgs, type AgentConfig } from './config.js';

export interface RunningAgent {
  client: AgentClient;
  containers: ContainerManager | null;
  tunnel: AgentTunnel;
  runner: AgentRunner;
  machineId: string;
  /** Resolves with the process exit code: 0 after a graceful stop, 3 when the server refused us for good. */
  done: Promise<number>;
  /** Graceful drain and disconnect. */
  stop(): Promise<void>;
}

export interface StartAgentOptions {
  logger: Logger;
  /** Replace the executor (tests, bench). */
  executor?: Executor;
  /** Skip nvidia-smi (bench: hundreds of in-process agents). */
  noGpuProbe?: boolean;
  heartbeat?: boolean;
  /** Inventory rescan period (0 = never). Default 60 s. */
  rescanMs?: number;
}

function executorConfig(c: AgentConfig): ExecutorConfig {
  switch (c.executor) {
    case 'simulate':
      return {
        kind: 'simulate',
        durationMs: c.simulateDurationMs,
        steps: c.simulateSteps,
        ...(c.simulateFail !== undefined ? { failMessage: c.simulateFail } : {}),
        hang: c.simulateHang ?? false,
        crash: c.simulateCrash ?? false,
        loaded: c.simulateLoaded ?? [],
      };
    case 'comfyui':
      return { kind: 'comfyui', baseUrl: c.comfyUrl, ...(c.comfyLivenessS !== undefined ? { livenessTimeoutMs: c.comfyLivenessS * 1000 } : {}) };
    case 'nerfstudio':
      return { kind: 'nerfstudio', stateDir: c.stateDir, ...(c.nsBinDir ? { binDir: c.nsBinDir } : {}) };
  }
}

/** The comfyui executor's ComfyUI: what it has loaded decides the custom node inventory; --comfy-cmd runs it. */
function comfyRuntimeOf(c: AgentConfig, log: Logger, onChange: () => void): ComfyRuntime | null {
  if (c.executor !== 'comfyui') return null;
  return new ComfyRuntime({
    baseUrl: c.comfyUrl,
    customNodesDir: c.customNodesDir,
    stateDir: c.stateDir,
    logger: log,
    cmd: c.comfyCmd,
    python: c.comfyPython,
    startTimeoutMs: (c.comfyStartTimeoutS ?? 300) * 1000,
    stallTimeoutMs: (c.comfyStallTimeoutS ?? 600) * 1000,
    restartAfterRuns: c.comfyRestartAfterRuns ?? 0,
    restartVramPercent: c.comfyRestartVramPercent ?? 0,
    onChange,
  });
}

/** What the agent advertises, scanned again on every call. */
interface InventoryScans {
  models(): Promise<ModelEntry[]>;
  nodes(): Promise<string[]>;
}

function inventoryScans(c: AgentConfig, comfy: ComfyRuntime | null, log: Logger): InventoryScans {
  let extraSig = '';
  /** The directories of the extra_model_paths.yaml files (re-read at every scan; a broken file is logged when it changes). */
  const extraDirs = (): ExtraModelDir[] => {
    const dirs: ExtraModelDir[] = [];
    const problems: string[] = [];
    for (const f of c.extraModelPaths ?? []) {
      try {
        const r = readExtraModelPaths(f);
        dirs.push(...r.dirs);
        if (r.ignored.length) problems.push(`${f}: entries that are not paths ignored: ${r.ignored.join(', ')}`);
      } catch (e) {
        problems.push((e as Error).message);
      }
    }
    const sig = JSON.stringify(problems);
    if (sig !== extraSig && problems.length) log.warn({ problems }, 'extra_model_paths.yaml');
    extraSig = sig;
    return dirs;
  };
  return {
    /** Models: every file under --models-dir, or for ComfyUI only what it can see (comfy-models.ts). */
    models: () => (c.executor === 'comfyui' ? scanComfyModels(c.modelsDir, extraDirs()) : scanModels(c.modelsDir)),
    /** Custom nodes: the custom_nodes dir, or for ComfyUI only the packages it has loaded. */
    nodes: async () => {
      const all = await customNodeInventory(c.customNodesDir);
      return comfy ? comfy.advertised(all) : all;
    },
  };
}

/** The container runtime this agent offers (null: none). */
function containerRuntimeOf(c: AgentConfig, log: Logger): ContainerRuntime | null {
  const runtime: ContainerRuntime | null =
    c.containerRuntime === 'docker' ? new DockerRuntime({ logger: log.child({ component: 'docker' }), socketPath: c.dockerSocket }) : c.containerRuntime === 'exec' ? new ExecRuntime({ logger: log.child({ component: 'exec' }), stateDir: c.stateDir }) : null;
  // processes a killed previous run left behind are stopped (the server re-places their replicas)
  if (runtime instanceof ExecRuntime) runtime.reapLeftovers();
  return runtime;
}

/** The heartbeat payload: CPU, RAM and the GPUs (sampled again after each beat when nvidia-smi gave the first sample). */
function heartbeatOf(gpus: GpuInfo[], firstSample: GpuSample[] | null, runningTasks: () => number, loaded: () => string[]): () => Heartbeat {
  const cpu = new CpuMeter();
  let gpuSample: GpuSample[] | null = firstSample;
  return () => {
    const total = os.totalmem();
    const sample = gpuSample ?? gpus.map((g, index) => ({ index, name: g.name, utilization_percent: 0, vram_used_gb: 0, vram_total_gb: g.vram_gb, temperature_c: 0 }));
    if (firstSample) void sampleGpus().then((s) => (gpuSample = s ?? gpuSample));
    return { cpu_percent: cpu.percent(), ram_used_bytes: total - os.freemem(), ram_total_bytes: total, gpus: sample, running_tasks: runningTasks(), loaded_models: loaded() };
  };
}

/** Container services: the runtime, its instances (reported on the stream) and the gateway tunnel. */
async function containerServices(
  c: AgentConfig,
  log: Logger,
  send: { report(r: ContainerReport): void; tunnel(f: TunnelFrame): boolean },
): Promise<{ runtime: ContainerRuntime | null; containers: ContainerManager | null; tunnelTarget: TunnelTarget | null; tunnel: AgentTunnel }> {
  const runtime = containerRuntimeOf(c, log);
  const containers: ContainerManager | null = runtime
    ? new ContainerManager({ runtime, report: (r) => send.report(reportOf(r)), healthIntervalMs: c.containerHealthIntervalMs, logger: log.child({ component: 'containers' }) })
    : null;
  if (containers) await containers.adopt().catch((e: unknown) => log.warn({ err_message: (e as Error).message }, 'could not list existing containers'));
  const tunnelTarget: TunnelTarget | null = c.tunnelUrl ? { host: new URL(c.tunnelUrl).hostname.replace(/^\[|\]$/g, ''), port: Number(new URL(c.tunnelUrl).port) } : null;
  const tunnel = new AgentTunnel({
    send: (f) => send.tunnel(f),
    target: (id) => (id === '' ? tunnelTarget : (containers?.address(id) ?? null)),
    logger: log.child({ component: 'tunnel' }),
  });
  return { runtime, containers, tunnelTarget, tunnel };
}

/** The tool types this agent's executor runs (advertised in hello: the scheduler places only those here). */
const toolTypesOf = (c: AgentConfig): string[] => (c.executor === 'simulate' ? (c.simulateToolTypes ?? ['comfyui', 'nerfstudio']) : [c.executor]);

/** The task runner: one slot per --concurrency, a scratch directory per task. */
function runnerOf(c: AgentConfig, executor: Executor, machineId: string, log: Logger, provision: RunnerOptions['provision']): AgentRunner {
  return new AgentRunner(executor, {
    slots: c.concurrency,
    workDir: c.workDir ? path.resolve(c.workDir) : path.join(os.tmpdir(), `gantry-agent-${machineId.replace(/[^A-Za-z0-9._-]/g, '_')}`),
    toolTypes: new Set(toolTypesOf(c)),
    executorName: c.executor,
    logger: log,
    provision,
  });
}

/** An unref'd interval (it does not keep the process alive), or null when ms <= 0. */
function every(ms: number, fn: () => void): NodeJS.Timeout | null {
  if (ms <= 0) return null;
  const t = setInterval(fn, ms);
  t.unref();
  return t;
}

export async function startAgent(c: AgentConfig, o: StartAgentOptions): Promise<RunningAgent> {
  const log = o.logger;
  const machineId = resolveMachineId(c.machineId, c.stateDir);
  const comfy = comfyRuntimeOf(c, log, () => void refreshInventory().catch((e: unknown) => log.warn({ err: e }, 'inventory rescan failed')));
  const baseExecutor = o.executor ?? createExecutor(executorConfig(c));
  const executor = comfy ? comfy.wrap(baseExecutor) : baseExecutor;
  const scan = inventoryScans(c, comfy, log);
  const probe = !o.noGpuProbe && c.gpus.length === 0;
  const firstSample: GpuSample[] | null = probe ? await sampleGpus() : null;
  const gpus: GpuInfo[] = c.gpus.length ? c.gpus : (firstSample ?? []).map((g) => ({ name: g.name, vram_gb: g.vram_total_gb }));
  let models: ModelEntry[] = await scan.models();
  let customNodes: string[] = await scan.nodes();
  /** The node class_types ComfyUI lists (/object_info): [] until read, or for another executor. */
  let nodeClasses: string[] = comfy?.nodes.classNames() ?? [];
  if (c.executor === 'simulate' && (c.simulateFail !== undefined || c.simulateHang || c.simulateCrash))
    log.warn({ simulate_fail: c.simulateFail !== undefined ? c.simulateFail || 'simulated failure' : false, simulate_hang: c.simulateHang ?? false, simulate_crash: c.simulateCrash ?? false }, 'simulate failure mode on: it applies to every task this agent runs');
  log.info({ machine_id: machineId, executor: c.executor, gpus, models: models.length, custom_nodes: customNodes.length, gpu_source: c.gpus.length ? 'flags' : firstSample ? 'nvidia-smi' : 'none' }, 'agent starting');

  const syncIntervalS = c.syncIntervalS ?? 60;
  const runner = runnerOf(c, executor, machineId, log, async (requiredModels): Promise<unknown> => {
    const r = await syncer.provision(requiredModels);
    if (comfy) {
      // a managed ComfyUI restarts to import the packages the sync installed: the task waits for it,
      // and the inventory it loaded goes out before `provisioned`
      await comfy.settled();
      await refreshInventory();
    }
    return r;
  });
  // ns-* trainings a killed previous run left on the GPU are stopped too
  if (executor instanceof NerfstudioExecutor && executor.reapLeftovers() > 0) log.warn('stopped nerfstudio processes left running by a previous run of this agent');
  const { runtime, containers, tunnelTarget, tunnel } = await containerServices(c, log, {
    report: (r) => client.send({ container: r }, 'container'),
    tunnel: (f) => client.sendTunnel(f),
  });
  let resolveDone: (code: number) => void = () => undefined;
  const done = new Promise<number>((r) => (resolveDone = r));
  const client: AgentClient = new AgentClient({
    server: c.server,
    credential: c.credential,
    tls: c.tls,
    caFile: c.caFile,
    window: c.window,
    logger: log,
    hello: () => ({
      machine_id: machineId,
      agent_version: AGENT_VERSION,
      display_name: c.name,
      labels: c.labels,
      gpus,
      models: models.map((m) => ({ path: m.path, size: m.size })),
      custom_nodes: customNodes,
      slots: c.concurrency,
      running: runner.held(),
      executor: c.executor,
      tool_types: toolTypesOf(c),
      loaded_models: baseExecutor.loaded?.() ?? [],
      node_classes: nodeClasses,
      draining: runner.draining,
      container_runtime: runtime?.name ?? '',
      containers: (containers?.reports() ?? []).map(reportOf),
      tunnel: tunnelTarget !== null,
    }),
    onTunnel: (f) => tunnel.onFrame(f),
    onStreamDown: () => tunnel.resetAll(),
    onMessage: (m) => {
      if (m.msg === 'container') runContainerCommand(containers, m.container, (r) => client.send({ container: r }, 'container'));
      else if (m.msg === 'sync') {
        if (syncIntervalS > 0) backgroundSync('server hint');
      } else runner.onMessage(m);
    },
    onFatal: (code, message) => {
      log.error({ code, message }, 'the server refused this agent; not reconnecting');
      void runner
        .shutdown(0)
        .then(() => client.close())
        .then(() => resolveDone(3), () => resolveDone(3));
    },
    heartbeat: o.heartbeat === false ? undefined : heartbeatOf(gpus, firstSample, () => runner.runningCount(), () => baseExecutor.loaded?.() ?? []),
  });
  runner.attach(client);

  /** Rescans the disk; a changed inventory is reported (queued on the stream, ahead of anything sent after). */
  const refreshInventory = async (): Promise<void> => {
    const m = await scan.models();
    const n = await scan.nodes();
    const k = comfy?.nodes.classNames() ?? [];
    const sig = (x: ModelEntry[], y: string[], z: string[]): string => JSON.stringify([x.map((e) => [e.path, e.size]), y, z]);
    if (sig(m, n, k) === sig(models, customNodes, nodeClasses)) return;
    models = m;
    customNodes = n;
    nodeClasses = k;
    log.info({ models: m.length, custom_nodes: n.length, custom_node_names: n, node_classes: k.length }, 'inventory changed');
    client.send({ inventory: { models: m.map((e) => ({ path: e.path, size: e.size })), custom_nodes: n, node_classes: k } }, 'inventory');
  };
  const syncer: ModelSyncer = new ModelSyncer({
    modelsDir: c.modelsDir,
    customNodesDir: c.customNodesDir,
    fetchManifest: (): Promise<SyncManifest__Output> => client.getSyncManifest(),
    afterSync: async () => {
      await comfy?.afterSync();
      await refreshInventory();
    },
    logger: log.child({ component: 'sync' }),
  });
  /** Errors are logged by the syncer and retried at the next period (a provisioning task reports its own). */
  const backgroundSync = (why: string): void => {
    log.debug({ why }, 'sync requested');
    syncer.request().catch(() => undefined);
  };
  comfy?.start().catch((e: unknown) => log.error({ err: e }, 'comfyui: could not start'));
  client.start();
  if (syncIntervalS > 0) backgroundSync('start');
  const syncTimer = every(syncIntervalS * 1000, () => backgroundSync('periodic'));
  const rescan = every(c.modelsDir || c.customNodesDir ? (o.rescanMs ?? 60_000) : 0, () => {
    refreshInventory().catch((e: unknown) => log.warn({ err: e }, 'inventory rescan failed'));
  });

  let stopping: Promise<void> | null = null;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      if (rescan) clearInterval(rescan);
      if (syncTimer) clearInterval(syncTimer);
      log.info({ running: runner.runningCount(), drain_timeout_s: c.drainTimeoutS }, 'draining: no new tasks; finishing running ones');
      await runner.shutdown(c.drainTimeoutS * 1000);
      if (client.connected && !(await client.flushed(10_000))) log.warn('some task results were not confirmed by the server before exit');
      syncer.close();
      tunnel.close();
      await containers?.close();
      await comfy?.stop();
      await client.close();
      await executor.close?.();
      log.info('agent stopped');
      resolveDone(0);
    })();
    return stopping;
  };
  void done.then(() => {
    void comfy?.stop();
    tunnel.close();
    void containers?.close();
    if (rescan) clearInterval(rescan);
    if (syncTimer) clearInterval(syncTimer);
    syncer.close();
  });
  return { client, runner, containers, tunnel, machineId, done, stop };
}
