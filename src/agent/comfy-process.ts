/**
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
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import type { Logger } from '../shared/logger.js';
import { childEnv, lineSplitter } from './comfy-child.js';
import { moduleOfEntry, type ComfyNodes } from './comfy-nodes.js';
import { ExecutorError } from './executors/types.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const SystemStats = z.object({ devices: z.array(z.object({ name: z.string().optional(), vram_total: z.number(), vram_free: z.number() }).passthrough()).default([]) }).passthrough();
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
