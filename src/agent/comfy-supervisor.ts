/**
 * A managed, self-healing ComfyUI (docs/api.md "Managed ComfyUI"), and what the agent knows about
 * the ComfyUI it runs tasks on, managed or not.
 *
 * The parts, each in its module: what ComfyUI has loaded (comfy-nodes.ts), the requirements of
 * custom node packages (comfy-requirements.ts), the managed process (comfy-process.ts); here the
 * executor guard, the watcher of an external ComfyUI and ComfyRuntime, which puts them together.
 */
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import WebSocket from 'ws';
import type { Logger } from '../shared/logger.js';
import { toApiGraph } from '../protocol/comfyui.js';
import { ExecutorError, type ExecContext, type ExecResult, type Executor } from './executors/types.js';
import { ComfyNodes, packageMentions } from './comfy-nodes.js';
import { RequirementsInstaller, syncedPackages } from './comfy-requirements.js';
import { ComfySupervisor } from './comfy-process.js';

export { childEnv } from './comfy-child.js';
export { ComfyNodes, moduleOfEntry, type NodeProblem } from './comfy-nodes.js';
export { REQUIREMENTS_STATE_FILE, RequirementsInstaller, syncedPackages } from './comfy-requirements.js';
export { ComfySupervisor, type ComfyRun, type SupervisorOptions } from './comfy-process.js';

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
