/**
 * The agent's configuration: flags and GANTRY_AGENT_* env (one table, AGENT_FLAGS, behind parsing,
 * --help and docs/api.md), parsed into an AgentConfig.
 */
import { parseArgs } from 'node:util';
import { existsSync } from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { parseGpuFlag, type GpuInfo } from './discovery.js';
import { DEFAULT_WINDOW } from '../protocol/agent-wire.js';

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
  /** simulate executor: the tool types it advertises (default both). */
  simulateToolTypes?: Array<'comfyui' | 'nerfstudio'>;
  /** simulate executor: model paths it reports loaded (warm placement). */
  simulateLoaded?: string[];
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
  ['simulate-tool-types', 'GANTRY_AGENT_SIMULATE_TOOL_TYPES', 'comfyui,nerfstudio', 'simulate executor: the tool types it advertises (the scheduler places only those on it)'],
  ['simulate-loaded', 'GANTRY_AGENT_SIMULATE_LOADED', '', 'simulate executor: comma-separated model paths it reports loaded (the scheduler prefers a warm agent)'],
  ['container-runtime', 'GANTRY_AGENT_CONTAINER_RUNTIME', '(docker when its socket exists, else none)', 'docker | exec | none: how container services run on this host (exec: docker_image is the command, the process listens on $PORT)'],
  ['docker-socket', 'GANTRY_AGENT_DOCKER_SOCKET', '(DOCKER_HOST when unix://, else /var/run/docker.sock)', 'Docker Engine API socket, a path or unix:///path (docker runtime)'],
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
  const list = (v: string | undefined): string[] => [...new Set((v ?? '').split(',').map((x) => x.trim()).filter(Boolean))];
  const simulateToolTypes = list(get('simulate-tool-types') ?? 'comfyui,nerfstudio');
  for (const t of simulateToolTypes) if (t !== 'comfyui' && t !== 'nerfstudio') throw new UsageError(`--simulate-tool-types: comfyui and/or nerfstudio, got ${JSON.stringify(t)}`);
  const simulateLoaded = list(get('simulate-loaded'));
  // --docker-socket takes a path or unix:///path; unset, a unix:// DOCKER_HOST (the docker CLI's setting) is used
  const socketOf = (v: string | undefined): string | undefined => (v?.startsWith('unix://') ? v.slice('unix://'.length) : v);
  const dockerSocket = socketOf(get('docker-socket')) ?? (env.DOCKER_HOST?.startsWith('unix://') ? socketOf(env.DOCKER_HOST) : undefined) ?? '/var/run/docker.sock';
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
    simulateToolTypes: simulateToolTypes as Array<'comfyui' | 'nerfstudio'>,
    simulateLoaded,
    window: intIn('window', get('window') ?? String(DEFAULT_WINDOW), 4, 4096),
    logLevel: get('log-level') ?? 'info',
    tracing: tracingOf(get('tracing') ?? 'off'),
    containerRuntime,
    dockerSocket,
    tunnelUrl,
    containerHealthIntervalMs: intIn('container-health-interval-ms', get('container-health-interval-ms') ?? '5000', 100, 3_600_000),
  };
}
