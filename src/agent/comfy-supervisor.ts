/**
 * A managed, self-healing ComfyUI (docs/api.md "Managed ComfyUI"), and what the agent knows about
 * the ComfyUI it runs tasks on, managed or not.
 *
 * ComfyNodes: which custom node packages ComfyUI has really loaded. ComfyUI imports custom_nodes
 * only at start-up (nodes.py init_external_custom_nodes): a package copied in while it runs is
 * invisible until a restart, a package without `__init__.py`, one ending in `.disabled`, or one whose
 * import raises (a requirement ComfyUI never installs) is missing for good. Every node class of a
 * loaded package carries `python_module: "custom_nodes.<module>"` in /object_info
 * (load_custom_node sets RELATIVE_PYTHON_MODULE; server.py node_info reports it), so a package is
 * advertised only when a class of it is listed there, by a ComfyUI started after the package was
 * installed (a "generation": a process start in managed mode, a new /ws connection otherwise).
 *
 * ComfySupervisor (`--comfy-cmd`): ComfyUI as a child process of the agent. `/bin/sh -c` runs the
 * command in its own process group with a watcher that kills the whole group when the agent's end
 * of a pipe closes (the agent died, even by SIGKILL), and its pid goes to <state dir>/comfyui.pid so
 * a restarted agent kills a ComfyUI a dead agent left (same pid and start time only). A (re)start is
 * ready when GET /system_stats answers and /object_info was read. It restarts ComfyUI:
 *  - after a sync installed custom node packages, at once when no run uses ComfyUI, else when the
 *    running ones end (new runs wait for it), so that they get imported;
 *  - at once when it exits (the runs in flight fail: the task's retry runs on the new one);
 *  - by the watchdog, when /system_stats has not answered, or running prompts made no progress, for
 *    --comfy-stall-timeout-s (the runs in flight fail with the reason);
 *  - optionally after N runs, or when a device's used VRAM is above a percentage after a run.
 *
 * RequirementsInstaller: a synced package's requirements.txt is installed with ComfyUI's Python
 * (`<python> -m pip install -r requirements.txt` in the package dir; its output is logged). A failure
 * is remembered: a task whose workflow uses a node class ComfyUI lacks fails with that reason, tasks
 * that do not need the package are not affected.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import WebSocket from 'ws';
import { z } from 'zod';
import type { Logger } from '../shared/logger.js';
import { toApiGraph } from '../protocol/comfyui.js';
import { ExecutorError, type ExecContext, type ExecResult, type Executor } from './executors/types.js';
import { SYNC_STATE_FILE } from './sync.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * The environment of ComfyUI and of pip: the agent's own, minus every GANTRY_* variable (the agent
 * credential among them): custom node packages and setup scripts are third-party code.
 */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('GANTRY_')) env[k] = v;
  return { ...env, ...extra };
}

/** The module name nodes.py gives an entry of custom_nodes (get_module_name): a file loses its .py. */
export const moduleOfEntry = (entry: string): string => (entry.endsWith('.py') ? entry.slice(0, -3) : entry);

const ObjectInfo = z.record(z.string(), z.object({ python_module: z.string().optional() }).passthrough());
const SystemStats = z.object({ devices: z.array(z.object({ name: z.string().optional(), vram_total: z.number(), vram_free: z.number() }).passthrough()).default([]) }).passthrough();

/** Why a package on disk is not loaded (requirements, the import error ComfyUI logged, or no restart yet). */
export interface NodeProblem {
  entry: string;
  reason: string;
}

export class ComfyNodes {
  /** Incremented at every ComfyUI start (managed) or new /ws connection (external). */
  generation = 0;
  /** class -> python_module, from the last /object_info read. */
  private classes: Map<string, string> | null = null;
  private modules = new Set<string>();
  /** The generation the modules were read from. */
  private modulesGen = -1;
  /** Package entry -> the generation that was current when sync installed it (not loaded by it). */
  private installedAt = new Map<string, number>();
  /** Package entry -> why its requirements are not installed. */
  readonly requirementFailures = new Map<string, string>();
  /** Module -> the exception ComfyUI logged importing it ("Cannot import ... module for custom nodes: ..."). */
  readonly importErrors = new Map<string, string>();

  constructor(private readonly o: { baseUrl: string; logger: Logger; fetchTimeoutMs?: number }) {}

  newGeneration(): void {
    this.generation++;
    this.importErrors.clear();
  }

  /** GET /object_info; false when ComfyUI did not answer (the last known classes are kept). */
  async refresh(): Promise<boolean> {
    const gen = this.generation;
    try {
      const res = await fetch(`${this.o.baseUrl}/object_info`, { signal: AbortSignal.timeout(this.o.fetchTimeoutMs ?? 30_000) });
      if (!res.ok) {
        await res.arrayBuffer().catch(() => undefined);
        return false;
      }
      const info = ObjectInfo.parse(await res.json());
      this.classes = new Map(Object.entries(info).map(([k, v]) => [k, v.python_module ?? 'nodes']));
      this.modules = new Set([...this.classes.values()].filter((m) => m.startsWith('custom_nodes.')).map((m) => m.slice('custom_nodes.'.length)));
      this.modulesGen = gen;
      return true;
    } catch (e) {
      this.o.logger.debug({ err_message: (e as Error).message }, 'comfyui: /object_info not available');
      return false;
    }
  }

  get known(): boolean {
    return this.classes !== null;
  }

  hasClass(c: string): boolean {
    return this.classes?.has(c) ?? false;
  }

  /** Sync (re)installed this package while the current ComfyUI runs: not loaded until the next generation. */
  markInstalled(entry: string): void {
    this.installedAt.set(entry, this.generation);
  }

  /** Whether ComfyUI has loaded this custom_nodes entry (a dir name or file.py) since it was installed. */
  loaded(entry: string): boolean {
    const at = this.installedAt.get(entry);
    if (at !== undefined && at >= this.modulesGen) return false;
    return this.modules.has(moduleOfEntry(entry));
  }

  /** Inventory entries (`name` or `name@version`) split into loaded ones and the rest. */
  split(inventory: readonly string[]): { loaded: string[]; notLoaded: string[] } {
    const loaded: string[] = [];
    const notLoaded: string[] = [];
    for (const e of inventory) (this.loaded(e.split('@')[0] ?? e) ? loaded : notLoaded).push(e);
    return { loaded, notLoaded };
  }

  /** Why an entry is not loaded. */
  reason(entry: string): string {
    const req = this.requirementFailures.get(entry);
    if (req) return `its requirements could not be installed: ${req}`;
    const at = this.installedAt.get(entry);
    if (at !== undefined && at >= this.modulesGen) return 'it was installed after ComfyUI started, and ComfyUI imports custom nodes only at start-up (restart ComfyUI, or let the agent manage it with --comfy-cmd)';
    const imp = this.importErrors.get(moduleOfEntry(entry));
    if (imp) return `ComfyUI failed to import it: ${imp}`;
    return 'ComfyUI did not load it (IMPORT FAILED in the ComfyUI log, no __init__.py, or no node class)';
  }
}

/** The quoted class names found in a package's .py files (bounded): which package a missing class comes from. */
async function packageMentions(dir: string, names: readonly string[]): Promise<Set<string>> {
  const found = new Set<string>();
  let files = 0;
  const walk = async (d: string, depth: number): Promise<void> => {
    if (depth > 3 || files > 300 || found.size === names.length) return;
    const entries = await readdir(d, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (e.name.startsWith('.') || e.name === '__pycache__') continue;
      const p = path.join(d, e.name);
      if (e.isDirectory()) await walk(p, depth + 1);
      else if (e.name.endsWith('.py') && files++ < 300) {
        const text = await readFile(p, 'utf8').catch(() => '');
        for (const n of names) if (text.includes(`"${n}"`) || text.includes(`'${n}'`)) found.add(n);
      }
    }
  };
  if ((await stat(dir).catch(() => null))?.isDirectory()) await walk(dir, 0);
  else if (dir.endsWith('.py')) {
    const text = await readFile(dir, 'utf8').catch(() => '');
    for (const n of names) if (text.includes(`"${n}"`) || text.includes(`'${n}'`)) found.add(n);
  }
  return found;
}

// ------------------------------------------------------------------ requirements

const ReqState = z.object({ version: z.literal(1), entries: z.record(z.string(), z.object({ sha256: z.string() })) });
export const REQUIREMENTS_STATE_FILE = '.gantry-requirements.json';

/** The packages sync installed: `.gantry-sync.json` entries whose directory exists (name, version, sha). */
export async function syncedPackages(dir: string | undefined): Promise<Array<{ name: string; version: string; sha256: string }>> {
  if (!dir) return [];
  try {
    const j = z
      .object({ entries: z.record(z.string(), z.object({ node_version: z.string(), sha256: z.string() })) })
      .parse(JSON.parse(await readFile(path.join(dir, SYNC_STATE_FILE), 'utf8')));
    const out: Array<{ name: string; version: string; sha256: string }> = [];
    for (const [name, s] of Object.entries(j.entries)) if (existsSync(path.join(dir, name))) out.push({ name, version: s.node_version, sha256: s.sha256 });
    return out.sort((a, b) => (a.name < b.name ? -1 : 1));
  } catch {
    return [];
  }
}

export class RequirementsInstaller {
  /** package -> requirements.txt hash tried by this process (a failure is not retried until it changes or the agent restarts). */
  private tried = new Map<string, string>();
  private warnedNoPython = false;

  constructor(
    private readonly o: { python: string | undefined; customNodesDir: string; logger: Logger; nodes: ComfyNodes; timeoutMs?: number },
  ) {}

  private async readState(): Promise<z.infer<typeof ReqState>> {
    try {
      return ReqState.parse(JSON.parse(await readFile(path.join(this.o.customNodesDir, REQUIREMENTS_STATE_FILE), 'utf8')));
    } catch {
      return { version: 1, entries: {} };
    }
  }

  /** Installs what the given packages need (skipping those installed from the same requirements.txt before). */
  async ensure(packages: readonly string[]): Promise<void> {
    const state = await this.readState();
    let dirty = false;
    for (const pkg of packages) {
      const file = path.join(this.o.customNodesDir, pkg, 'requirements.txt');
      const text = await readFile(file).catch(() => null);
      if (text === null) {
        this.o.nodes.requirementFailures.delete(pkg);
        continue;
      }
      const sha = createHash('sha256').update(text).digest('hex');
      if (state.entries[pkg]?.sha256 === sha || this.tried.get(pkg) === sha) continue;
      this.tried.set(pkg, sha);
      if (!this.o.python) {
        const why = 'the agent has no --comfy-python to install its requirements.txt with';
        this.o.nodes.requirementFailures.set(pkg, why);
        if (!this.warnedNoPython) this.o.logger.warn({ package: pkg }, `custom node requirements not installed: ${why}`);
        this.warnedNoPython = true;
        continue;
      }
      const error = await this.install(pkg, file);
      if (error === null) {
        this.o.nodes.requirementFailures.delete(pkg);
        state.entries[pkg] = { sha256: sha };
        dirty = true;
      } else this.o.nodes.requirementFailures.set(pkg, error);
    }
    if (dirty) {
      const f = path.join(this.o.customNodesDir, REQUIREMENTS_STATE_FILE);
      await writeFile(`${f}.tmp`, `${JSON.stringify(state, null, 1)}\n`);
      await rename(`${f}.tmp`, f);
    }
  }

  /** `<python> -m pip install -r requirements.txt` in the package dir; null on success, else the error. */
  private install(pkg: string, file: string): Promise<string | null> {
    const python = this.o.python as string;
    const log = this.o.logger.child({ component: 'pip', package: pkg });
    log.info({ python, requirements: file }, 'installing custom node requirements');
    return new Promise((resolve) => {
      const tail: string[] = [];
      const child = spawn(python, ['-m', 'pip', 'install', '-r', file], { cwd: path.dirname(file), stdio: ['ignore', 'pipe', 'pipe'], env: childEnv() });
      const timer = setTimeout(() => child.kill('SIGKILL'), this.o.timeoutMs ?? 30 * 60_000);
      const relay = (stream: string) => lineSplitter((line) => {
        log.info({ stream, line }, 'pip output');
        tail.push(line);
        if (tail.length > 20) tail.shift();
      });
      child.stdout.on('data', relay('stdout'));
      child.stderr.on('data', relay('stderr'));
      child.on('error', (e) => {
        clearTimeout(timer);
        log.warn({ err_message: e.message }, 'custom node requirements: could not run pip');
        resolve(`could not run ${python} -m pip: ${e.message}`);
      });
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        if (code === 0) {
          log.info('custom node requirements installed');
          return resolve(null);
        }
        const errs = tail.filter((l) => /error/i.test(l));
        const detail = (errs.length ? errs : tail).slice(-3).join(' | ');
        const error = `${path.basename(python)} -m pip install -r requirements.txt failed (${signal ? `killed by ${signal}` : `exit ${code}`})${detail ? `: ${detail}` : ''}`;
        log.warn({ error }, 'custom node requirements could not be installed: tasks using its nodes fail');
        resolve(error);
      });
    });
  }
}

/** Splits a byte stream into lines (\n, \r\n or \r: progress bars), calling fn for each non-empty one. */
function lineSplitter(fn: (line: string) => void): (chunk: Buffer) => void {
  let buf = '';
  return (chunk) => {
    buf += chunk.toString('utf8');
    const parts = buf.split(/\r\n|\n|\r/);
    buf = parts.pop() ?? '';
    if (buf.length > 64 * 1024) {
      parts.push(buf);
      buf = '';
    }
    for (const p of parts) if (p.trim()) fn(p.length > 2000 ? `${p.slice(0, 2000)}...` : p);
  };
}

// ------------------------------------------------------------------ the managed process

export interface SupervisorOptions {
  /** The command line, run by /bin/sh -c. */
  cmd: string;
  baseUrl: string;
  stateDir: string;
  logger: Logger;
  nodes: ComfyNodes;
  /** How long a (re)start may take to answer. */
  startTimeoutMs: number;
  /** Watchdog: no /system_stats answer, or no progress of running prompts, for this long = hung (0: off). */
  stallTimeoutMs: number;
  /** Restart after this many runs (0: never). */
  restartAfterRuns: number;
  /** Restart after a run when a device's used VRAM is above this percentage (0: never). */
  restartVramPercent: number;
  /** Called when a (re)started ComfyUI is ready (its /object_info was read). */
  onReady(): void;
  /** Planned restarts: SIGTERM, then SIGKILL after this long. Default 10 s. */
  stopGraceMs?: number;
}

/** One run using ComfyUI. */
export interface ComfyRun {
  /** Rejects (ExecutorError) when the supervisor kills ComfyUI under the run. */
  readonly killed: Promise<never>;
  touch(): void;
  release(): void;
}

interface RunRec {
  fail(e: ExecutorError): void;
  lastActivity: number;
}

type State = 'stopped' | 'starting' | 'ready' | 'restarting' | 'closed';

/** What the pid file says: the process group leader and its start time (/proc/<pid>/stat field 22). */
const PidFile = z.object({ pid: z.number().int().positive(), start: z.string() });

function procStart(pid: number): string | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/**
 * The shell that starts ComfyUI: fd 3 keeps the read end of the agent's pipe; a background watcher
 * blocks on it and kills the whole process group (`kill -KILL 0`) when it reaches EOF, which happens
 * when the agent's write end closes: the agent exited, however it died. ComfyUI itself gets
 * /dev/null as stdin and does not hold the pipe.
 */
const LAUNCHER = 'exec 3<&0; (read _gantry_eof <&3; kill -KILL 0) </dev/null >/dev/null 2>&1 & exec /bin/sh -c "$GANTRY_COMFY_CMD" </dev/null 3<&-';

export class ComfySupervisor {
  private state: State = 'stopped';
  private child: ChildProcess | null = null;
  private runs = new Set<RunRec>();
  private restartWhy: string | null = null;
  private killWhy: string | null = null;
  private change: { p: Promise<void>; fire: () => void };
  private startFailures = 0;
  private lastStartError = '';
  private lastAnswer = Date.now();
  private lastActivity = Date.now();
  private runsSinceStart = 0;
  private watchdog: NodeJS.Timeout | null = null;
  private polling = false;
  private startTimedOut = -1;
  private tail: string[] = [];
  private readonly pidFile: string;
  private readonly log: Logger;
  private exited: Promise<void> = Promise.resolve();
  /** Starts so far (tests, logs). */
  starts = 0;

  constructor(private readonly o: SupervisorOptions) {
    this.pidFile = path.join(o.stateDir, 'comfyui.pid');
    this.log = o.logger.child({ component: 'comfyui' });
    this.change = this.newChange();
  }

  private newChange(): { p: Promise<void>; fire: () => void } {
    let fire: () => void = () => undefined;
    const p = new Promise<void>((r) => (fire = r));
    return { p, fire };
  }

  private changed(): void {
    const c = this.change;
    this.change = this.newChange();
    c.fire();
  }

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /** Kills a ComfyUI a dead agent left behind (pid file, same start time), then starts ComfyUI. */
  async start(): Promise<void> {
    await this.reapLeftover();
    if (this.o.stallTimeoutMs > 0) {
      const every = Math.max(200, Math.min(5_000, Math.floor(this.o.stallTimeoutMs / 4)));
      this.watchdog = setInterval(() => this.tick(), every);
      this.watchdog.unref();
    }
    this.spawn();
  }

  private async reapLeftover(): Promise<void> {
    let rec: z.infer<typeof PidFile>;
    try {
      rec = PidFile.parse(JSON.parse(readFileSync(this.pidFile, 'utf8')));
    } catch {
      return;
    }
    if (alive(rec.pid) && procStart(rec.pid) === rec.start) {
      this.log.warn({ pid: rec.pid }, 'comfyui: killing the ComfyUI a previous agent process left running');
      try {
        process.kill(-rec.pid, 'SIGKILL');
      } catch {
        try {
          process.kill(rec.pid, 'SIGKILL');
        } catch {
          /* gone */
        }
      }
      for (let i = 0; i < 100 && alive(rec.pid) && procStart(rec.pid) === rec.start; i++) await sleep(50);
    }
    rmSync(this.pidFile, { force: true });
  }

  private spawn(): void {
    if (this.state === 'closed') return;
    this.state = 'starting';
    // whatever asked for a restart before this start is satisfied by it
    this.restartWhy = null;
    this.o.nodes.newGeneration();
    this.starts++;
    this.runsSinceStart = 0;
    this.tail = [];
    const child = spawn('/bin/sh', ['-c', LAUNCHER], {
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: childEnv({ GANTRY_COMFY_CMD: this.o.cmd }),
    });
    this.child = child;
    const gen = this.o.nodes.generation;
    this.log.info({ pid: child.pid, generation: gen }, 'comfyui: starting');
    if (child.pid !== undefined) {
      try {
        mkdirSync(this.o.stateDir, { recursive: true, mode: 0o700 });
        writeFileSync(this.pidFile, `${JSON.stringify({ pid: child.pid, start: procStart(child.pid) ?? '' })}\n`);
      } catch (e) {
        this.log.warn({ err_message: (e as Error).message }, 'comfyui: could not write the pid file');
      }
    }
    const relay = (stream: string) =>
      lineSplitter((line) => {
        this.tail.push(line);
        if (this.tail.length > 30) this.tail.shift();
        const m = /^Cannot import (.+) module for custom nodes: (.*)$/.exec(line);
        if (m) this.o.nodes.importErrors.set(moduleOfEntry(path.basename(m[1] ?? '')), m[2] ?? '');
        this.log.info({ stream, line }, 'comfyui output');
      });
    child.stdout?.on('data', relay('stdout'));
    child.stderr?.on('data', relay('stderr'));
    child.stdin?.on('error', () => undefined);
    this.exited = new Promise((resolve) => {
      child.on('error', (e) => {
        this.log.error({ err_message: e.message }, 'comfyui: could not start /bin/sh');
      });
      child.on('exit', (code, signal) => {
        // whatever is left of the group (the watcher, grandchildren) goes too
        try {
          if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
        } catch {
          /* already gone */
        }
        child.stdin?.destroy();
        rmSync(this.pidFile, { force: true });
        this.onExit(gen, code, signal);
        resolve();
      });
    });
    void this.waitReady(gen);
  }

  private exitText(code: number | null, signal: NodeJS.Signals | null): string {
    return signal ? `killed by ${signal}` : `exit code ${code}`;
  }

  private onExit(gen: number, code: number | null, signal: NodeJS.Signals | null): void {
    if (gen !== this.o.nodes.generation) return;
    this.child = null;
    const how = this.exitText(code, signal);
    const last = this.tail.slice(-5).join(' | ');
    if (this.state === 'closed') return;
    if (this.state === 'restarting') {
      this.log.info({ how, why: this.killWhy ?? this.restartWhy }, 'comfyui: stopped for a restart');
      this.killWhy = null;
      this.spawn();
      return;
    }
    if (this.state === 'starting') {
      const timedOut = this.startTimedOut === gen;
      this.startFailed(`${timedOut ? `ComfyUI did not answer GET /system_stats within ${Math.round(this.o.startTimeoutMs / 1000)} s of its start` : `ComfyUI exited (${how}) before it answered`}${last ? `; last output: ${last}` : ''}`);
      return;
    }
    // it was ready: a crash
    this.log.error({ how, last_output: last }, 'comfyui: exited unexpectedly; restarting it');
    this.failRuns(`ComfyUI exited unexpectedly (${how}) while this task ran; the agent restarted it`);
    this.spawn();
  }

  private startFailed(why: string): void {
    this.startFailures++;
    this.lastStartError = why;
    const delay = Math.min(60_000, 1000 * 2 ** Math.min(this.startFailures - 1, 6));
    this.log.error({ error: why, retry_in_ms: delay, failures: this.startFailures }, 'comfyui: start failed');
    this.state = 'stopped';
    this.changed();
    setTimeout(() => {
      if (this.state === 'stopped') this.spawn();
    }, delay).unref();
  }

  private async waitReady(gen: number): Promise<void> {
    const deadline = Date.now() + this.o.startTimeoutMs;
    while (this.state === 'starting' && gen === this.o.nodes.generation) {
      if (Date.now() > deadline) {
        this.log.error({ timeout_ms: this.o.startTimeoutMs }, 'comfyui: did not answer in time; killing it');
        this.startTimedOut = gen;
        this.killGroup('SIGKILL');
        return;
      }
      const ok = await fetch(`${this.o.baseUrl}/system_stats`, { signal: AbortSignal.timeout(2_000) })
        .then(async (r) => (await r.arrayBuffer(), r.ok))
        .catch(() => false);
      if (ok && gen === this.o.nodes.generation && this.state === 'starting' && (await this.o.nodes.refresh()) && gen === this.o.nodes.generation && this.state === 'starting') {
        this.state = 'ready';
        this.startFailures = 0;
        this.lastAnswer = Date.now();
        this.lastActivity = Date.now();
        this.log.info({ pid: this.child?.pid, generation: gen }, 'comfyui: ready');
        this.o.onReady();
        this.changed();
        this.maybeRestart();
        return;
      }
      await sleep(250);
    }
  }

  private killGroup(sig: NodeJS.Signals): void {
    const pid = this.child?.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, sig);
    } catch {
      /* gone */
    }
  }

  private failRuns(message: string): void {
    for (const r of this.runs) r.fail(new ExecutorError('tool_error', message));
    this.runs.clear();
  }

  /** The watchdog: no answer, or no progress while prompts run, for the stall timeout. */
  private tick(): void {
    if (this.state !== 'ready') return;
    const now = Date.now();
    const stall = this.o.stallTimeoutMs;
    const s = Math.round(stall / 100) / 10;
    if (now - this.lastAnswer > stall) return this.hung(`ComfyUI stopped answering (no GET /system_stats answer for ${s} s)`);
    if (this.runs.size > 0 && now - this.lastActivity > stall) return this.hung(`ComfyUI made no progress on the running prompt for ${s} s`);
    if (this.polling) return;
    this.polling = true;
    void fetch(`${this.o.baseUrl}/system_stats`, { signal: AbortSignal.timeout(Math.min(stall, 10_000)) })
      .then(async (r) => {
        await r.arrayBuffer();
        if (r.ok) this.lastAnswer = Date.now();
      })
      .catch(() => undefined)
      .finally(() => (this.polling = false));
  }

  private hung(why: string): void {
    this.log.error({ why, pid: this.child?.pid }, 'comfyui watchdog: restarting ComfyUI');
    this.failRuns(`${why} (watchdog, --comfy-stall-timeout-s); the agent restarted it`);
    this.state = 'restarting';
    this.killWhy = why;
    this.changed();
    this.killGroup('SIGKILL');
  }

  /** A restart once no run uses ComfyUI (new runs wait for it). */
  requestRestart(why: string): void {
    if (this.state === 'closed') return;
    this.restartWhy = this.restartWhy ? `${this.restartWhy}; ${why}` : why;
    this.log.info({ why, running: this.runs.size }, this.runs.size ? 'comfyui: restart requested; it happens when the running tasks end' : 'comfyui: restart requested');
    this.changed();
    this.maybeRestart();
  }

  private maybeRestart(): void {
    if (this.restartWhy === null || this.runs.size > 0) return;
    if (this.state === 'ready' || this.state === 'starting') {
      const why = this.restartWhy;
      this.restartWhy = null;
      this.state = 'restarting';
      this.killWhy = why;
      this.changed();
      this.log.info({ why, pid: this.child?.pid }, 'comfyui: restarting');
      this.killGroup('SIGTERM');
      const child = this.child;
      setTimeout(() => {
        if (this.child === child && child) this.killGroup('SIGKILL');
      }, this.o.stopGraceMs ?? 10_000).unref();
    } else if (this.state === 'stopped') {
      // not running (start failed and is waiting to retry): the next start picks up everything
      this.restartWhy = null;
    }
  }

  /**
   * Waits until ComfyUI is ready with no restart pending and registers a run. Rejects (tool_error)
   * when a start attempt fails meanwhile, or (cancelled) on abort.
   */
  async acquire(signal?: AbortSignal): Promise<ComfyRun> {
    await this.settled(signal);
    let fail: (e: ExecutorError) => void = () => undefined;
    const killed = new Promise<never>((_, reject) => (fail = reject));
    killed.catch(() => undefined);
    const rec: RunRec = { fail, lastActivity: Date.now() };
    this.runs.add(rec);
    this.lastActivity = Date.now();
    let released = false;
    return {
      killed,
      touch: () => {
        rec.lastActivity = Date.now();
        this.lastActivity = Math.max(this.lastActivity, rec.lastActivity);
      },
      release: () => {
        if (released) return;
        released = true;
        const was = this.runs.delete(rec);
        if (!was) return;
        if (this.runs.size === 0) this.lastActivity = Date.now();
        this.runsSinceStart++;
        if (this.o.restartAfterRuns > 0 && this.runsSinceStart >= this.o.restartAfterRuns) this.requestRestart(`${this.runsSinceStart} run(s) since the last start (--comfy-restart-after-runs)`);
        if (this.o.restartVramPercent > 0) void this.checkVram();
        this.maybeRestart();
      },
    };
  }

  /** Ready, with no restart pending (provisioning waits for this after a sync). */
  async settled(signal?: AbortSignal): Promise<void> {
    const failuresAtEntry = this.startFailures;
    for (;;) {
      if (this.state === 'closed') throw new ExecutorError('tool_error', 'the agent is shutting down');
      if (signal?.aborted) throw new ExecutorError('cancelled', 'task cancelled');
      if (this.state === 'ready' && this.restartWhy === null) return;
      if (this.startFailures > failuresAtEntry) throw new ExecutorError('tool_error', `ComfyUI is not running: ${this.lastStartError}`);
      const wait = this.change.p;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal?.removeEventListener('abort', done);
          resolve();
        };
        void wait.then(done);
        signal?.addEventListener('abort', done, { once: true });
      });
    }
  }

  private async checkVram(): Promise<void> {
    try {
      const r = await fetch(`${this.o.baseUrl}/system_stats`, { signal: AbortSignal.timeout(10_000) });
      const s = SystemStats.parse(await r.json());
      for (const d of s.devices) {
        if (d.vram_total <= 0) continue;
        const used = ((d.vram_total - d.vram_free) / d.vram_total) * 100;
        if (used > this.o.restartVramPercent) {
          this.requestRestart(`${d.name ?? 'a device'} uses ${used.toFixed(1)}% of its VRAM after a run (--comfy-restart-vram-percent ${this.o.restartVramPercent})`);
          return;
        }
      }
    } catch (e) {
      this.log.debug({ err_message: (e as Error).message }, 'comfyui: VRAM check failed');
    }
  }

  /** Stops ComfyUI (SIGTERM, SIGKILL after the grace) and the watchdog. */
  async stop(): Promise<void> {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.changed();
    if (this.watchdog) clearInterval(this.watchdog);
    this.failRuns('the agent is shutting down');
    if (!this.child) return;
    this.killGroup('SIGTERM');
    const t = setTimeout(() => this.killGroup('SIGKILL'), this.o.stopGraceMs ?? 10_000);
    await this.exited;
    clearTimeout(t);
    this.log.info('comfyui: stopped');
  }
}

// ------------------------------------------------------------------ the executor guard

/**
 * Wraps the comfyui executor: a run waits for a ready ComfyUI (managed mode), counts as activity for
 * the watchdog, fails when the supervisor kills ComfyUI under it, and fails before submitting when
 * its graph uses a node class ComfyUI lacks and a custom node package on disk is not loaded (with
 * the reason: requirements, import error, no restart yet) instead of ComfyUI's bare "does not exist".
 */
export class GuardedComfyExecutor implements Executor {
  readonly name: string;

  constructor(
    private readonly inner: Executor,
    private readonly runtime: ComfyRuntime,
  ) {
    this.name = inner.name;
  }

  async run(ctx: ExecContext): Promise<ExecResult> {
    const sup = this.runtime.supervisor;
    const run = sup ? await sup.acquire(ctx.signal) : null;
    try {
      await this.runtime.preflight(ctx.workflow);
      if (!run) return await this.inner.run(ctx);
      const abort = new AbortController();
      const inner = this.inner.run({
        ...ctx,
        signal: AbortSignal.any([ctx.signal, abort.signal]),
        onProgress: (p) => {
          run.touch();
          ctx.onProgress(p);
        },
        log: (m, e) => {
          run.touch();
          ctx.log(m, e);
        },
      });
      return await Promise.race([
        inner,
        run.killed.catch((e: unknown) => {
          abort.abort();
          inner.catch(() => undefined);
          throw e;
        }),
      ]);
    } finally {
      run?.release();
    }
  }

  async close(): Promise<void> {
    await this.inner.close?.();
  }
}

// ------------------------------------------------------------------ external mode: restarts seen on /ws

/** External ComfyUI: every new /ws connection is a new generation (a restart closes the socket). */
class ComfyWatcher {
  private ws: WebSocket | null = null;
  private closed = false;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly o: { baseUrl: string; nodes: ComfyNodes; onChange(): void; logger: Logger; retryMs?: number }) {}

  start(): void {
    if (this.closed) return;
    const url = `${this.o.baseUrl.replace(/^http/, 'ws')}/ws?clientId=gantry-agent-watch-${process.pid}`;
    const ws = new WebSocket(url, { handshakeTimeout: 10_000 });
    this.ws = ws;
    let opened = false;
    ws.on('open', () => {
      opened = true;
      this.o.nodes.newGeneration();
      this.o.logger.info({ generation: this.o.nodes.generation }, 'comfyui: connected');
      void this.o.nodes.refresh().then(() => this.o.onChange());
    });
    ws.on('message', () => undefined);
    ws.on('error', () => undefined);
    ws.on('close', () => {
      if (opened) this.o.logger.info('comfyui: connection lost (restart?)');
      if (this.closed) return;
      this.timer = setTimeout(() => this.start(), this.o.retryMs ?? 2_000);
      this.timer.unref();
    });
  }

  stop(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.ws?.terminate();
  }
}

// ------------------------------------------------------------------ everything together

export interface ComfyRuntimeOptions {
  baseUrl: string;
  customNodesDir: string | undefined;
  stateDir: string;
  logger: Logger;
  /** --comfy-cmd: managed mode. */
  cmd?: string | undefined;
  python?: string | undefined;
  startTimeoutMs: number;
  stallTimeoutMs: number;
  restartAfterRuns: number;
  restartVramPercent: number;
  /** The set of loaded custom nodes may have changed: rescan and report the inventory. */
  onChange(): void;
}

export class ComfyRuntime {
  readonly nodes: ComfyNodes;
  readonly supervisor: ComfySupervisor | null;
  private readonly watcher: ComfyWatcher | null;
  private readonly installer: RequirementsInstaller | null;
  /** `name@version#sha` of the synced packages at the last look. */
  private synced = new Set<string>();
  private lastNotLoaded = '';

  constructor(private readonly o: ComfyRuntimeOptions) {
    const log = o.logger.child({ component: 'comfyui' });
    this.nodes = new ComfyNodes({ baseUrl: o.baseUrl.replace(/\/+$/, ''), logger: log });
    this.installer = o.customNodesDir ? new RequirementsInstaller({ python: o.python, customNodesDir: o.customNodesDir, logger: o.logger, nodes: this.nodes }) : null;
    this.supervisor = o.cmd
      ? new ComfySupervisor({
          cmd: o.cmd,
          baseUrl: o.baseUrl.replace(/\/+$/, ''),
          stateDir: o.stateDir,
          logger: o.logger,
          nodes: this.nodes,
          startTimeoutMs: o.startTimeoutMs,
          stallTimeoutMs: o.stallTimeoutMs,
          restartAfterRuns: o.restartAfterRuns,
          restartVramPercent: o.restartVramPercent,
          onReady: () => o.onChange(),
        })
      : null;
    this.watcher = this.supervisor ? null : new ComfyWatcher({ baseUrl: o.baseUrl.replace(/\/+$/, ''), nodes: this.nodes, onChange: () => o.onChange(), logger: log });
  }

  /** Installs missing requirements of synced packages, then starts (managed) or watches (external) ComfyUI. */
  async start(): Promise<void> {
    const pkgs = await syncedPackages(this.o.customNodesDir);
    this.synced = new Set(pkgs.map((p) => `${p.name}@${p.version}#${p.sha256}`));
    await this.installer?.ensure(pkgs.map((p) => p.name)).catch((e: unknown) => this.o.logger.warn({ err: e }, 'custom node requirements check failed'));
    if (this.supervisor) await this.supervisor.start();
    else this.watcher?.start();
  }

  wrap(executor: Executor): Executor {
    return new GuardedComfyExecutor(executor, this);
  }

  /**
   * After a sync: packages (re)installed since the last look are not loaded by the running ComfyUI;
   * their requirements are installed, and a managed ComfyUI restarts to import them.
   */
  async afterSync(): Promise<void> {
    const pkgs = await syncedPackages(this.o.customNodesDir);
    const now = new Set(pkgs.map((p) => `${p.name}@${p.version}#${p.sha256}`));
    const fresh = pkgs.filter((p) => !this.synced.has(`${p.name}@${p.version}#${p.sha256}`));
    this.synced = now;
    for (const p of fresh) this.nodes.markInstalled(p.name);
    await this.installer?.ensure(pkgs.map((p) => p.name)).catch((e: unknown) => this.o.logger.warn({ err: e }, 'custom node requirements install failed'));
    if (fresh.length > 0) this.supervisor?.requestRestart(`custom node package(s) installed: ${fresh.map((p) => `${p.name}@${p.version}`).join(', ')}`);
  }

  /** Provisioning: a managed ComfyUI is (re)started with what the sync installed. */
  async settled(): Promise<void> {
    await this.supervisor?.settled();
  }

  /** The custom node inventory entries ComfyUI has loaded (the others are logged once per change). */
  advertised(inventory: readonly string[]): string[] {
    const { loaded, notLoaded } = this.nodes.split(inventory);
    const sig = JSON.stringify(notLoaded);
    if (sig !== this.lastNotLoaded && notLoaded.length > 0)
      this.o.logger.info({ not_loaded: notLoaded.map((e) => ({ entry: e, reason: this.nodes.reason(e.split('@')[0] ?? e) })) }, 'custom nodes not advertised: ComfyUI has not loaded them');
    this.lastNotLoaded = sig;
    return loaded;
  }

  /** Before a run: a node class ComfyUI lacks that a package on disk (not loaded) provides fails the run, naming why. */
  async preflight(workflow: unknown): Promise<void> {
    const g = toApiGraph(workflow);
    if (!g.ok) return; // the executor reports it
    const classes = [...new Set(Object.values(g.graph).map((n) => n.class_type))];
    let missing = classes.filter((c) => !this.nodes.hasClass(c));
    if (missing.length > 0 && !this.supervisor) {
      // an external ComfyUI may have been restarted meanwhile; unreachable: the executor says so
      if (!(await this.nodes.refresh())) return;
      missing = classes.filter((c) => !this.nodes.hasClass(c));
    }
    if (missing.length === 0 || !this.nodes.known || !this.o.customNodesDir) return;
    const dir = this.o.customNodesDir;
    const entries = await readdir(dir).catch(() => [] as string[]);
    const notLoaded = entries.filter((e) => !e.startsWith('.') && e !== '__pycache__' && !e.endsWith('.disabled') && !this.nodes.loaded(e));
    if (notLoaded.length === 0) return;
    const pkgs = await syncedPackages(dir);
    const label = (e: string): string => {
      const p = pkgs.find((x) => x.name === e);
      return p ? `${p.name}@${p.version}` : e;
    };
    const blamed: string[] = [];
    for (const e of notLoaded) {
      const hits = await packageMentions(path.join(dir, e), missing);
      if (hits.size > 0) blamed.push(`custom node package ${label(e)} (node class ${[...hits].join(', ')}) is not loaded: ${this.nodes.reason(e)}`);
    }
    const detail = blamed.length > 0 ? blamed : notLoaded.map((e) => `custom node package ${label(e)} is not loaded: ${this.nodes.reason(e)}`);
    throw new ExecutorError('tool_error', `this workflow uses node class(es) ComfyUI does not have (${missing.join(', ')}); ${detail.join('; ')}`);
  }

  async stop(): Promise<void> {
    this.watcher?.stop();
    await this.supervisor?.stop();
  }
}
