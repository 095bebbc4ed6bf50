/**
 * `gantry agent`: configuration (flags and GANTRY_AGENT_* env), discovery, the stream client and
 * the task runner put together. startAgent() is also what the benchmark runs in-process.
 */
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { Logger } from '../shared/logger.js';
import { AgentClient } from './client.js';
import { AgentRunner } from './runner.js';
import { CpuMeter, parseGpuFlag, resolveMachineId, sampleGpus, scanModels, type GpuInfo, type GpuSample, type ModelEntry } from './discovery.js';
import { customNodeInventory, ModelSyncer } from './sync.js';
import { NerfstudioExecutor, createExecutor, type Executor, type ExecutorConfig } from './executors/index.js';
import { DEFAULT_WINDOW } from '../protocol/agent-wire.js';
import type { SyncManifest__Output } from '../gen/gantry/agent/v1/SyncManifest.js';
import { existsSync } from 'node:fs';
import { ContainerManager } from './containers/manager.js';
import { DockerRuntime } from './containers/docker.js';
import { ExecRuntime } from './containers/exec.js';
import type { ContainerRuntime, InstanceReport } from './containers/types.js';
import { AgentTunnel, type TunnelTarget } from './tunnel.js';
import { ComfyRuntime } from './comfy-supervisor.js';
import { readExtraModelPaths, scanComfyModels, type ExtraModelDir } from './comfy-models.js';
import type { ContainerCommand__Output } from '../gen/gantry/agent/v1/ContainerCommand.js';

export const AGENT_VERSION = '0.1.0';

export interface AgentConfig {
  server: string;
  credential: string;
  labels: string[];
  modelsDir: string | undefined;
  customNodesDir: string | undefined;
  executor: 'simulate' | 'comfyui' | 'nerfstudio';
  comfyUrl: string;
  /** comfyui executor: a prompt neither running, pending nor in history (or ComfyUI unreachable) this long ends the attempt. Default 30. */
  comfyLivenessS?: number;
  /** Managed mode: the command that starts ComfyUI (run by /bin/sh -c); absent = attach to --comfy-url. */
  comfyCmd?: string | undefined;
  /** The Python ComfyUI runs with (synced packages' requirements.txt are installed with it). */
  comfyPython?: string | undefined;
  comfyStartTimeoutS?: number;
  /** Watchdog: 0 = off. */
  comfyStallTimeoutS?: number;
  comfyRestartAfterRuns?: number;
  comfyRestartVramPercent?: number;
  /** extra_model_paths.yaml files whose directories are scanned for models (comfyui executor). */
  extraModelPaths?: string[];
  nsBinDir: string | undefined;
  concurrency: number;
  machineId: string | undefined;
  stateDir: string;
  name: string;
  tls: boolean;
  caFile: string | undefined;
  gpus: GpuInfo[];
  workDir: string | undefined;
  drainTimeoutS: number;
  /** Background sync period (also at start and on server hints); 0 = sync only when a task provisions. Default 60. */
  syncIntervalS?: number;
  simulateDurationMs: number;
  simulateSteps: number;
  /** simulate executor: every task fails with this message ('' = the default message). */
  simulateFail?: string | undefined;
  /** simulate executor: every task hangs until cancelled. */
  simulateHang?: boolean;
  /** simulate executor: every task kills the agent (SIGKILL). */
  simulateCrash?: boolean;
  window: number;
  logLevel: string;
  /** OpenTelemetry traces: off, or otlp (exported as the standard OTEL_* variables say). */
  tracing: 'off' | 'otlp';
  /** Container services: the runtime this agent offers ('none': it takes no container services). */
  containerRuntime: 'docker' | 'exec' | 'none';
  dockerSocket: string;
  /** The local HTTP endpoint reachable through the gateway's agent tunnel ('' = none). */
  tunnelUrl: string;
  containerHealthIntervalMs: number;
}

/** A WebSocket server entry: ws:// or wss://, a host, an optional port and path prefix, nothing else. */
function isWsServerUrl(s: string): boolean {
  if (!/^wss?:\/\/[^\s/,?#]+(\/[^\s,?#]*)?$/i.test(s)) return false;
  try {
    const u = new URL(s);
    return u.hostname !== '' && u.username === '' && u.password === '';
  } catch {
    return false;
  }
}

/** Flag, env variable, default, help: the single table behind parsing, --help and docs/api.md. */
export const AGENT_FLAGS = [
  ['server', 'GANTRY_AGENT_SERVER', '', 'HOST:PORT of the gRPC agent endpoint, or ws[s]://HOST[:PORT] for the WebSocket one on the HTTP port (through an ingress that passes WebSocket but not gRPC) (required); a comma-separated list (a cluster\'s nodes, both kinds mixed) fails over to the next'],
  ['credential', 'GANTRY_AGENT_CREDENTIAL', '', 'agent credential ak-... (required)'],
  ['labels', 'GANTRY_AGENT_LABELS', '', 'comma-separated labels (workflows require_labels match them)'],
  ['models-dir', 'GANTRY_AGENT_MODELS_DIR', '', 'models root to scan, advertise and sync the team\'s models into (e.g. /opt/ComfyUI/models)'],
  ['custom-nodes-dir', 'GANTRY_AGENT_CUSTOM_NODES_DIR', '<models-dir>/../custom_nodes', 'ComfyUI custom_nodes dir to advertise and install the team\'s packages into'],
  ['executor', 'GANTRY_AGENT_EXECUTOR', 'comfyui', 'comfyui | nerfstudio | simulate'],
  ['comfy-url', 'GANTRY_AGENT_COMFY_URL', 'http://127.0.0.1:8188', 'ComfyUI base URL (comfyui executor)'],
  ['comfy-liveness-s', 'GANTRY_AGENT_COMFY_LIVENESS_S', '30', 'comfyui executor: end an attempt (retryable) whose prompt ComfyUI has lost (restart, cleared queue) or that ComfyUI left unreachable this long'],
  ['comfy-cmd', 'GANTRY_AGENT_COMFY_CMD', '', 'managed ComfyUI: start it with this command (/bin/sh -c; it must listen on --comfy-url), restart it after custom node syncs, crashes and hangs; without it the agent attaches to --comfy-url'],
  ['comfy-python', 'GANTRY_AGENT_COMFY_PYTHON', '(--comfy-cmd\'s first word when it is a python)', 'the Python ComfyUI runs with: a synced custom node package\'s requirements.txt is installed with `<python> -m pip install -r`'],
  ['comfy-start-timeout-s', 'GANTRY_AGENT_COMFY_START_TIMEOUT_S', '300', 'managed ComfyUI: how long a (re)start may take to answer GET /system_stats'],
  ['comfy-stall-timeout-s', 'GANTRY_AGENT_COMFY_STALL_TIMEOUT_S', '600', 'managed ComfyUI watchdog: restart it when it does not answer, or a running prompt makes no progress, for N s (the attempt fails and is retried; 0: off)'],
  ['comfy-restart-after-runs', 'GANTRY_AGENT_COMFY_RESTART_AFTER_RUNS', '0', 'managed ComfyUI: restart it after N runs (0: never)'],
  ['comfy-restart-vram-percent', 'GANTRY_AGENT_COMFY_RESTART_VRAM_PERCENT', '0', 'managed ComfyUI: restart it after a run when a device\'s used VRAM (/system_stats) is above N % (0: never)'],
  ['extra-model-paths', 'GANTRY_AGENT_EXTRA_MODEL_PATHS', '<models-dir>/../extra_model_paths.yaml (if present)', 'comma-separated extra_model_paths.yaml files: their directories are advertised too (comfyui executor)'],
  ['ns-bin-dir', 'GANTRY_AGENT_NS_BIN_DIR', '(PATH)', 'directory of ns-process-data, ns-train, ns-export'],
  ['concurrency', 'GANTRY_AGENT_CONCURRENCY', '1', 'tasks run at once (slots)'],
  ['machine-id', 'GANTRY_AGENT_MACHINE_ID', '(persisted)', 'stable machine id; default: generated once, kept in <state-dir>/agent-id'],
  ['state-dir', 'GANTRY_AGENT_STATE_DIR', '~/.gantry', 'where the generated machine id (and running process records) are kept'],
  ['name', 'GANTRY_AGENT_NAME', '(hostname)', 'display name'],
  ['tls', 'GANTRY_AGENT_TLS', 'false', 'connect with TLS'],
  ['ca', 'GANTRY_AGENT_CA', '', 'PEM CA bundle for a private CA (implies --tls)'],
  ['gpu', 'GANTRY_AGENT_GPUS', '(nvidia-smi)', 'GPU as "NAME:VRAM_GB", repeatable (env: comma-separated); overrides nvidia-smi'],
  ['work-dir', 'GANTRY_AGENT_WORK_DIR', '<tmp>/gantry-agent-<machine-id>', 'per-task scratch directories'],
  ['drain-timeout-s', 'GANTRY_AGENT_DRAIN_TIMEOUT_S', '300', 'on SIGTERM: how long running tasks may finish before they are failed'],
  ['sync-interval-s', 'GANTRY_AGENT_SYNC_INTERVAL_S', '60', 'sync models/custom nodes at start, on server hints and every N s (0: only when a task provisions)'],
  ['simulate-duration-ms', 'GANTRY_AGENT_SIMULATE_DURATION_MS', '1000', 'simulate executor: run time per task'],
  ['simulate-steps', 'GANTRY_AGENT_SIMULATE_STEPS', '10', 'simulate executor: progress ticks per task'],
  ['simulate-fail', 'GANTRY_AGENT_SIMULATE_FAIL', '', 'simulate executor: every task fails (tool_error) halfway; --simulate-fail=MESSAGE sets the error'],
  ['simulate-hang', 'GANTRY_AGENT_SIMULATE_HANG', 'false', 'simulate executor: every task hangs after its steps until cancelled (or timed out)'],
  ['simulate-crash', 'GANTRY_AGENT_SIMULATE_CRASH', 'false', 'simulate executor: every task kills the agent process (SIGKILL) after its first tick'],
  ['container-runtime', 'GANTRY_AGENT_CONTAINER_RUNTIME', '(docker when its socket exists, else none)', 'docker | exec | none: how container services run on this host (exec: docker_image is the command, the process listens on $PORT)'],
  ['docker-socket', 'GANTRY_AGENT_DOCKER_SOCKET', '/var/run/docker.sock', 'Docker Engine API socket (docker runtime)'],
  ['tunnel-url', 'GANTRY_AGENT_TUNNEL_URL', '(--comfy-url with the comfyui executor)', 'local http://HOST:PORT exposed to team members through GET /agents/{id}/tunnel; "none" to expose nothing'],
  ['container-health-interval-ms', 'GANTRY_AGENT_CONTAINER_HEALTH_INTERVAL_MS', '5000', 'health check period of container service instances'],
  ['window', 'GANTRY_AGENT_WINDOW', String(DEFAULT_WINDOW), 'flow-control window (messages in flight)'],
  ['log-level', 'LOG_LEVEL', 'info', 'fatal | error | warn | info | debug | trace | silent'],
  ['tracing', 'GANTRY_TRACING', 'off', 'off | otlp: OpenTelemetry spans of each task run, exported over OTLP as the OTEL_* variables say'],
] as const;

export class UsageError extends Error {}

export function agentUsage(): string {
  const rows = AGENT_FLAGS.map(([f, env, def, help]) => `  --${f.padEnd(22)} ${env.padEnd(34)} ${help}${def ? ` [${def}]` : ''}`);
  return `gantry agent --server HOST:PORT|ws[s]://HOST[:PORT][,...] --credential ak-... [options]\n\n  flag                     env\n${rows.join('\n')}\n  --help\n`;
}

const intIn = (name: string, v: string, min: number, max: number): number => {
  if (!/^\d+$/.test(v)) throw new UsageError(`--${name}: expected an integer, got ${JSON.stringify(v)}`);
  const n = Number(v);
  if (n < min || n > max) throw new UsageError(`--${name}: must be between ${min} and ${max}`);
  return n;
};
const tracingOf = (v: string): 'off' | 'otlp' => {
  if (v !== 'off' && v !== 'otlp') throw new UsageError(`--tracing: off or otlp, got ${JSON.stringify(v)}`);
  return v;
};
const boolOf = (v: string | boolean | undefined): boolean => v === true || (typeof v === 'string' && ['1', 'true', 'yes'].includes(v.toLowerCase()));

/** Flags win over env; env over defaults. Returns null for --help. */
export function parseAgentArgs(argv: string[], env: Record<string, string | undefined> = process.env): AgentConfig | null {
  const options: Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> = {
    help: { type: 'boolean' },
    tls: { type: 'boolean' },
    gpu: { type: 'string', multiple: true },
    'simulate-hang': { type: 'boolean' },
    'simulate-crash': { type: 'boolean' },
  };
  for (const [f] of AGENT_FLAGS) options[f] ??= { type: 'string' };
  // --simulate-fail takes an optional value: only the =MESSAGE form sets one
  const args = argv.map((a) => (a === '--simulate-fail' ? '--simulate-fail=' : a));
  let values: Record<string, string | boolean | Array<string | boolean> | undefined>;
  try {
    values = parseArgs({ args, options, strict: true, allowPositionals: false }).values;
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  if (values.help) return null;
  const get = (flag: string): string | undefined => {
    const v = values[flag];
    if (typeof v === 'string') return v;
    const row = AGENT_FLAGS.find((r) => r[0] === flag);
    const e = row ? env[row[1]] : undefined;
    return e !== undefined && e.trim() !== '' ? e.trim() : undefined;
  };
  const server = get('server');
  if (!server) throw new UsageError('--server HOST:PORT or ws[s]://HOST[:PORT] (or GANTRY_AGENT_SERVER) is required');
  // a list (a cluster's nodes): the agent fails over to the next when its stream ends; HOST:PORT is gRPC, ws[s]:// the WebSocket transport
  for (const one of server.split(','))
    if (!/^[^\s/,]+:\d{1,5}$/.test(one.trim()) && !isWsServerUrl(one.trim()))
      throw new UsageError(`--server: expected HOST:PORT, ws://HOST[:PORT] or wss://HOST[:PORT], or a comma-separated list of them, got ${JSON.stringify(server)}`);
  const credential = get('credential');
  if (!credential) throw new UsageError('--credential ak-... (or GANTRY_AGENT_CREDENTIAL) is required');
  if (!credential.startsWith('ak-')) throw new UsageError('--credential: an agent credential (ak-...) is required');
  const executor = get('executor') ?? 'comfyui';
  if (executor !== 'simulate' && executor !== 'comfyui' && executor !== 'nerfstudio') throw new UsageError('--executor: comfyui, nerfstudio or simulate');
  const flagGpus = (values.gpu as string[] | undefined) ?? [];
  const gpuSpecs = flagGpus.length ? flagGpus : (env.GANTRY_AGENT_GPUS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  let gpus: GpuInfo[];
  try {
    gpus = gpuSpecs.map(parseGpuFlag);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const modelsDir = get('models-dir');
  const defNodes = modelsDir ? path.join(path.dirname(path.resolve(modelsDir)), 'custom_nodes') : undefined;
  const ca = get('ca');
  const envFail = env.GANTRY_AGENT_SIMULATE_FAIL?.trim();
  const simulateFail =
    typeof values['simulate-fail'] === 'string' ? values['simulate-fail'] : envFail && !['0', 'false', 'no'].includes(envFail.toLowerCase()) ? (boolOf(envFail) ? '' : envFail) : undefined;
  const simulateHang = boolOf(values['simulate-hang'] as boolean | undefined) || boolOf(env.GANTRY_AGENT_SIMULATE_HANG);
  const simulateCrash = boolOf(values['simulate-crash'] as boolean | undefined) || boolOf(env.GANTRY_AGENT_SIMULATE_CRASH);
  if (executor !== 'simulate' && (simulateFail !== undefined || simulateHang || simulateCrash))
    throw new UsageError('--simulate-fail, --simulate-hang and --simulate-crash need --executor simulate');
  const dockerSocket = get('docker-socket') ?? '/var/run/docker.sock';
  const runtimeFlag = get('container-runtime') ?? (existsSync(dockerSocket) ? 'docker' : 'none');
  if (runtimeFlag !== 'docker' && runtimeFlag !== 'exec' && runtimeFlag !== 'none') throw new UsageError('--container-runtime: docker, exec or none');
  const containerRuntime: 'docker' | 'exec' | 'none' = runtimeFlag;
  const tunnelFlag = get('tunnel-url') ?? (executor === 'comfyui' ? (get('comfy-url') ?? 'http://127.0.0.1:8188') : 'none');
  if (tunnelFlag !== 'none' && !/^http:\/\/[^/\s]+:\d{1,5}\/?$/.test(tunnelFlag)) throw new UsageError(`--tunnel-url: expected http://HOST:PORT or none, got ${JSON.stringify(tunnelFlag)}`);
  const tunnelUrl = tunnelFlag === 'none' ? '' : tunnelFlag;
  const comfyCmd = get('comfy-cmd');
  if (comfyCmd !== undefined && executor !== 'comfyui') throw new UsageError('--comfy-cmd needs --executor comfyui');
  // the default Python: --comfy-cmd's first word when it is one (/opt/venv/bin/python3 main.py ...)
  const firstWord = comfyCmd?.trim().split(/\s+/)[0] ?? '';
  const comfyPython = get('comfy-python') ?? (/^python[0-9.]*$/.test(path.basename(firstWord)) && !/["'$`]/.test(firstWord) ? firstWord : undefined);
  const extraFlag = get('extra-model-paths');
  const defExtra = modelsDir ? path.join(path.dirname(path.resolve(modelsDir)), 'extra_model_paths.yaml') : undefined;
  const extraModelPaths = extraFlag !== undefined ? extraFlag.split(',').map((s) => s.trim()).filter(Boolean) : defExtra && existsSync(defExtra) ? [defExtra] : [];
  return {
    server,
    credential,
    labels: [...new Set((get('labels') ?? '').split(',').map((s) => s.trim()).filter(Boolean))],
    modelsDir,
    customNodesDir: get('custom-nodes-dir') ?? defNodes,
    executor,
    comfyUrl: get('comfy-url') ?? 'http://127.0.0.1:8188',
    comfyLivenessS: intIn('comfy-liveness-s', get('comfy-liveness-s') ?? '30', 1, 86_400),
    comfyCmd,
    comfyPython,
    comfyStartTimeoutS: intIn('comfy-start-timeout-s', get('comfy-start-timeout-s') ?? '300', 1, 86_400),
    comfyStallTimeoutS: intIn('comfy-stall-timeout-s', get('comfy-stall-timeout-s') ?? '600', 0, 7 * 86_400),
    comfyRestartAfterRuns: intIn('comfy-restart-after-runs', get('comfy-restart-after-runs') ?? '0', 0, 1_000_000),
    comfyRestartVramPercent: intIn('comfy-restart-vram-percent', get('comfy-restart-vram-percent') ?? '0', 0, 100),
    extraModelPaths,
    nsBinDir: get('ns-bin-dir'),
    concurrency: intIn('concurrency', get('concurrency') ?? '1', 1, 256),
    machineId: get('machine-id'),
    stateDir: get('state-dir') ?? path.join(os.homedir(), '.gantry'),
    name: get('name') ?? os.hostname(),
    tls: boolOf(values.tls as boolean | undefined) || boolOf(env.GANTRY_AGENT_TLS) || ca !== undefined,
    caFile: ca,
    gpus,
    workDir: get('work-dir'),
    drainTimeoutS: intIn('drain-timeout-s', get('drain-timeout-s') ?? '300', 0, 7 * 86_400),
    syncIntervalS: intIn('sync-interval-s', get('sync-interval-s') ?? '60', 0, 7 * 86_400),
    simulateDurationMs: intIn('simulate-duration-ms', get('simulate-duration-ms') ?? '1000', 0, 86_400_000),
    simulateSteps: intIn('simulate-steps', get('simulate-steps') ?? '10', 0, 100_000),
    simulateFail,
    simulateHang,
    simulateCrash,
    window: intIn('window', get('window') ?? String(DEFAULT_WINDOW), 4, 4096),
    logLevel: get('log-level') ?? 'info',
    tracing: tracingOf(get('tracing') ?? 'off'),
    containerRuntime,
    dockerSocket,
    tunnelUrl,
    containerHealthIntervalMs: intIn('container-health-interval-ms', get('container-health-interval-ms') ?? '5000', 100, 3_600_000),
  };
}

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
      };
    case 'comfyui':
      return { kind: 'comfyui', baseUrl: c.comfyUrl, ...(c.comfyLivenessS !== undefined ? { livenessTimeoutMs: c.comfyLivenessS * 1000 } : {}) };
    case 'nerfstudio':
      return { kind: 'nerfstudio', stateDir: c.stateDir, ...(c.nsBinDir ? { binDir: c.nsBinDir } : {}) };
  }
}

export async function startAgent(c: AgentConfig, o: StartAgentOptions): Promise<RunningAgent> {
  const log = o.logger;
  const machineId = resolveMachineId(c.machineId, c.stateDir);
  // the comfyui executor: what ComfyUI has loaded decides the custom node inventory; --comfy-cmd runs it
  const comfy: ComfyRuntime | null =
    c.executor === 'comfyui'
      ? new ComfyRuntime({
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
          onChange: () => void refreshInventory().catch((e: unknown) => log.warn({ err: e }, 'inventory rescan failed')),
        })
      : null;
  const baseExecutor = o.executor ?? createExecutor(executorConfig(c));
  const executor = comfy ? comfy.wrap(baseExecutor) : baseExecutor;
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
  /** Models: every file under --models-dir, or for ComfyUI only what it can see (comfy-models.ts). */
  const scanInventoryModels = (): Promise<ModelEntry[]> => (c.executor === 'comfyui' ? scanComfyModels(c.modelsDir, extraDirs()) : scanModels(c.modelsDir));
  /** Custom nodes: the custom_nodes dir, or for ComfyUI only the packages it has loaded. */
  const scanInventoryNodes = async (): Promise<string[]> => {
    const all = await customNodeInventory(c.customNodesDir);
    return comfy ? comfy.advertised(all) : all;
  };
  const probe = !o.noGpuProbe && c.gpus.length === 0;
  const firstSample: GpuSample[] | null = probe ? await sampleGpus() : null;
  const gpus: GpuInfo[] = c.gpus.length ? c.gpus : (firstSample ?? []).map((g) => ({ name: g.name, vram_gb: g.vram_total_gb }));
  let gpuSample: GpuSample[] | null = firstSample;
  let models: ModelEntry[] = await scanInventoryModels();
  let customNodes: string[] = await scanInventoryNodes();
  if (c.executor === 'simulate' && (c.simulateFail !== undefined || c.simulateHang || c.simulateCrash))
    log.warn({ simulate_fail: c.simulateFail !== undefined ? c.simulateFail || 'simulated failure' : false, simulate_hang: c.simulateHang ?? false, simulate_crash: c.simulateCrash ?? false }, 'simulate failure mode on: it applies to every task this agent runs');
  log.info({ machine_id: machineId, executor: c.executor, gpus, models: models.length, custom_nodes: customNodes.length, gpu_source: c.gpus.length ? 'flags' : firstSample ? 'nvidia-smi' : 'none' }, 'agent starting');

  const syncIntervalS = c.syncIntervalS ?? 60;
  const runner: AgentRunner = new AgentRunner(executor, {
    slots: c.concurrency,
    workDir: c.workDir ? path.resolve(c.workDir) : path.join(os.tmpdir(), `gantry-agent-${machineId.replace(/[^A-Za-z0-9._-]/g, '_')}`),
    toolTypes: c.executor === 'simulate' ? null : new Set([c.executor]),
    executorName: c.executor,
    logger: log,
    provision: async (requiredModels): Promise<unknown> => {
      const r = await syncer.provision(requiredModels);
      if (comfy) {
        // a managed ComfyUI restarts to import the packages the sync installed: the task waits for it,
        // and the inventory it loaded goes out before `provisioned`
        await comfy.settled();
        await refreshInventory();
      }
      return r;
    },
  });
  // container services: the runtime, its instances (reported on the stream) and the gateway tunnel
  const runtime: ContainerRuntime | null =
    c.containerRuntime === 'docker' ? new DockerRuntime({ logger: log.child({ component: 'docker' }), socketPath: c.dockerSocket }) : c.containerRuntime === 'exec' ? new ExecRuntime({ logger: log.child({ component: 'exec' }), stateDir: c.stateDir }) : null;
  // processes a killed previous run left behind are stopped (the server re-places their replicas)
  if (runtime instanceof ExecRuntime) runtime.reapLeftovers();
  // ns-* trainings a killed previous run left on the GPU are stopped too
  if (executor instanceof NerfstudioExecutor && executor.reapLeftovers() > 0) log.warn('stopped nerfstudio processes left running by a previous run of this agent');
  const reportOf = (r: InstanceReport) => ({ instance_id: r.instanceId, service_id: r.serviceId, state: r.state, healthy: r.healthy, error: r.error });
  const containers: ContainerManager | null = runtime
    ? new ContainerManager({ runtime, report: (r) => client.send({ container: reportOf(r) }, 'container'), healthIntervalMs: c.containerHealthIntervalMs, logger: log.child({ component: 'containers' }) })
    : null;
  if (containers) await containers.adopt().catch((e: unknown) => log.warn({ err_message: (e as Error).message }, 'could not list existing containers'));
  const tunnelTarget: TunnelTarget | null = c.tunnelUrl ? { host: new URL(c.tunnelUrl).hostname.replace(/^\[|\]$/g, ''), port: Number(new URL(c.tunnelUrl).port) } : null;
  const tunnel = new AgentTunnel({
    send: (f) => client.sendTunnel(f),
    target: (id) => (id === '' ? tunnelTarget : (containers?.address(id) ?? null)),
    logger: log.child({ component: 'tunnel' }),
  });
  const onContainer = (cmd: ContainerCommand__Output): void => {
    if (!containers) {
      const id = cmd.start?.instance_id ?? cmd.stop ?? cmd.remove ?? '';
      if (id) client.send({ container: { instance_id: id, service_id: cmd.start?.service_id ?? '', state: cmd.start ? 'failed' : 'removed', healthy: false, error: 'this agent runs no container runtime (--container-runtime none)' } }, 'container');
      return;
    }
    if (cmd.start) {
      const st = cmd.start;
      containers.start({
        instanceId: st.instance_id,
        serviceId: st.service_id,
        serviceSlug: st.service_slug,
        image: st.image,
        exposedPort: st.exposed_port,
        env: st.env.map((e) => ({ name: e.name, value: e.value })),
        volumes: st.volumes.map((v) => ({ hostPath: v.host_path, containerPath: v.container_path })),
        gpuCount: st.gpu_count,
        healthPath: st.health_path,
      });
    } else if (cmd.stop) containers.stop(cmd.stop);
    else if (cmd.remove) containers.remove(cmd.remove);
  };
  const cpu = new CpuMeter();
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
      draining: runner.draining,
      container_runtime: runtime?.name ?? '',
      containers: (containers?.reports() ?? []).map(reportOf),
      tunnel: tunnelTarget !== null,
    }),
    onTunnel: (f) => tunnel.onFrame(f),
    onStreamDown: () => tunnel.resetAll(),
    onMessage: (m) => {
      if (m.msg === 'container') {
        if (m.container) onContainer(m.container);
      } else if (m.msg === 'sync') {
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
    heartbeat:
      o.heartbeat === false
        ? undefined
        : () => {
            const total = os.totalmem();
            const sample = gpuSample ?? gpus.map((g, index) => ({ index, name: g.name, utilization_percent: 0, vram_used_gb: 0, vram_total_gb: g.vram_gb, temperature_c: 0 }));
            if (probe && firstSample) void sampleGpus().then((s) => (gpuSample = s ?? gpuSample));
            return { cpu_percent: cpu.percent(), ram_used_bytes: total - os.freemem(), ram_total_bytes: total, gpus: sample, running_tasks: runner.runningCount() };
          },
  });
  runner.attach(client);

  /** Rescans the disk; a changed inventory is reported (queued on the stream, ahead of anything sent after). */
  const refreshInventory = async (): Promise<void> => {
    const m = await scanInventoryModels();
    const n = await scanInventoryNodes();
    const sig = (x: ModelEntry[], y: string[]): string => JSON.stringify([x.map((e) => [e.path, e.size]), y]);
    if (sig(m, n) === sig(models, customNodes)) return;
    models = m;
    customNodes = n;
    log.info({ models: m.length, custom_nodes: n.length, custom_node_names: n }, 'inventory changed');
    client.send({ inventory: { models: m.map((e) => ({ path: e.path, size: e.size })), custom_nodes: n } }, 'inventory');
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
  const syncTimer = syncIntervalS > 0 ? setInterval(() => backgroundSync('periodic'), syncIntervalS * 1000) : null;
  syncTimer?.unref();

  const rescanMs = o.rescanMs ?? 60_000;
  const rescan =
    rescanMs > 0 && (c.modelsDir || c.customNodesDir)
      ? setInterval(() => {
          refreshInventory().catch((e: unknown) => log.warn({ err: e }, 'inventory rescan failed'));
        }, rescanMs)
      : null;
  rescan?.unref();

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
