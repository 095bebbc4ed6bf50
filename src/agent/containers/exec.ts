/**
 * The exec runtime: a container service instance is a plain local process. spec.image is the
 * command (a JSON array of argv strings, or a command line split on whitespace), spawned without a
 * shell. The process gets the agent's environment minus GANTRY_* variables, the spec's env, and
 * PORT=<a free loopback port> it must listen on; it is "started" once a TCP connect to that port
 * succeeds.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from '../../shared/logger.js';
import type { ContainerRuntime, ContainerSpec, ExitInfo, InstanceAddress, RuntimeOptions } from './types.js';

export interface ExecRuntimeOptions extends RuntimeOptions {
  /** How long start waits for the process to accept a TCP connection on PORT (default 30 s). */
  startTimeoutMs?: number;
  /** Working directory of the spawned processes (default: the agent's). */
  cwd?: string;
  /**
   * Where each running process is recorded (pid and argv), so that an agent restarted after a
   * crash stops what its previous run left behind (reapLeftovers). Absent: not recorded.
   */
  stateDir?: string;
}

const LOG_LINES = 200;
const POLL_MS = 50;
const HOST = '127.0.0.1';

/** The last `max` lines written to stdout and stderr (interleaved as they arrive). */
export class LineRing {
  private readonly lines: string[] = [];
  private readonly partial = new Map<string, string>();
  constructor(private readonly max = LOG_LINES) {}

  write(stream: string, chunk: string): void {
    const text = (this.partial.get(stream) ?? '') + chunk;
    const parts = text.split(/\r?\n/);
    this.partial.set(stream, parts.pop() ?? '');
    for (const p of parts) this.push(p);
    // a runaway line without a newline is kept bounded
    const rest = this.partial.get(stream) ?? '';
    if (rest.length > 64 * 1024) {
      this.push(rest);
      this.partial.set(stream, '');
    }
  }

  /** Flushes unterminated lines (when the process has exited). */
  flush(): void {
    for (const v of this.partial.values()) if (v) this.push(v);
    this.partial.clear();
  }

  tail(n: number): string[] {
    const pending = [...this.partial.values()].filter((v) => v !== '');
    const all = [...this.lines, ...pending];
    return n <= 0 ? [] : all.slice(-Math.min(n, this.max));
  }

  private push(line: string): void {
    this.lines.push(line);
    if (this.lines.length > this.max) this.lines.splice(0, this.lines.length - this.max);
  }
}

/** argv of an exec spec's image: a JSON array of strings, or a command line split on whitespace. */
export function parseCommand(image: string): string[] {
  const s = image.trim();
  if (s.startsWith('[')) {
    let v: unknown;
    try {
      v = JSON.parse(s);
    } catch (e) {
      throw new Error(`exec command is not a valid JSON array: ${(e as Error).message}`);
    }
    if (!Array.isArray(v) || v.length === 0 || !v.every((a): a is string => typeof a === 'string') || v[0] === '') {
      throw new Error('exec command must be a non-empty JSON array of strings');
    }
    return v;
  }
  const argv = s.split(/\s+/).filter((a) => a !== '');
  if (argv.length === 0) throw new Error('exec command is empty');
  return argv;
}

/** A TCP port free on 127.0.0.1 right now (listen on port 0, read it, close). */
export function freePort(host = HOST): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? resolve(port) : reject(new Error('could not find a free port'))));
    });
  });
}

/** Whether a TCP connect to host:port succeeds within timeoutMs. */
export function tcpProbe(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      sock.removeAllListeners();
      sock.on('error', () => undefined);
      sock.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });
}

interface ExecInstance {
  spec: ContainerSpec;
  child: ChildProcess;
  port: number;
  logs: LineRing;
  /** Set once stop() was asked for: the exit is then not reported to onExit. */
  stopping: boolean;
  exited: boolean;
  exitCode: number | null;
  exitSignal: NodeJS.Signals | null;
  /** Resolves when the process has exited. */
  exit: Promise<void>;
}

export class ExecRuntime implements ContainerRuntime {
  readonly name = 'exec' as const;
  private readonly logger: Logger;
  private readonly startTimeoutMs: number;
  private readonly cwd: string | undefined;
  private readonly instances = new Map<string, ExecInstance>();

  constructor(o: ExecRuntimeOptions) {
    this.logger = o.logger;
    this.startTimeoutMs = o.startTimeoutMs ?? 30_000;
    this.cwd = o.cwd;
    this.recordDir = o.stateDir ? path.join(o.stateDir, 'exec-instances') : null;
  }

  private readonly recordDir: string | null;

  /**
   * Stops the processes a previous run of this agent left behind (it was killed and could not stop
   * them): each recorded pid whose command line still matches is killed. Returns how many.
   */
  reapLeftovers(): number {
    if (!this.recordDir) return 0;
    let n = 0;
    let files: string[] = [];
    try {
      files = readdirSync(this.recordDir).filter((f) => f.endsWith('.json'));
    } catch {
      return 0;
    }
    for (const f of files) {
      const file = path.join(this.recordDir, f);
      try {
        const r = JSON.parse(readFileSync(file, 'utf8')) as { pid: number; argv: string[] };
        const cmdline = readFileSync(`/proc/${r.pid}/cmdline`, 'utf8');
        if (cmdline === `${r.argv.join('\0')}\0`) {
          process.kill(r.pid, 'SIGKILL');
          n++;
        }
      } catch {
        /* gone already, or not ours */
      }
      try {
        unlinkSync(file);
      } catch {
        /* already removed */
      }
    }
    if (n) this.logger.warn({ processes: n }, 'exec runtime: stopped instances left behind by a previous run of this agent');
    return n;
  }

  private record(instanceId: string, pid: number, argv: string[]): void {
    if (!this.recordDir) return;
    try {
      mkdirSync(this.recordDir, { recursive: true });
      writeFileSync(path.join(this.recordDir, `${instanceId.replace(/[^A-Za-z0-9_-]/g, '_')}.json`), JSON.stringify({ pid, argv }));
    } catch (e) {
      this.logger.warn({ err_message: (e as Error).message }, 'exec runtime: could not record the instance');
    }
  }

  private unrecord(instanceId: string): void {
    if (!this.recordDir) return;
    try {
      unlinkSync(path.join(this.recordDir, `${instanceId.replace(/[^A-Za-z0-9_-]/g, '_')}.json`));
    } catch {
      /* not recorded */
    }
  }

  async start(spec: ContainerSpec, onExit: (info: ExitInfo) => void): Promise<InstanceAddress> {
    const existing = this.instances.get(spec.instanceId);
    if (existing && !existing.exited) {
      if (await tcpProbe(HOST, existing.port, 1000)) return { instanceId: spec.instanceId, host: HOST, port: existing.port };
      throw new Error(`instance ${spec.instanceId} is already running but not accepting connections`);
    }
    this.instances.delete(spec.instanceId);
    const argv = parseCommand(spec.image);
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('GANTRY_')) env[k] = v;
    for (const e of spec.env) env[e.name] = e.value;
    env['PORT'] = String(port);

    const [cmd, ...args] = argv as [string, ...string[]];
    // never log env values or the arguments (either may carry secrets): the executable only
    this.logger.info({ instanceId: spec.instanceId, serviceId: spec.serviceId, command: cmd, port }, 'exec runtime: starting instance');
    const child = spawn(cmd, args, { cwd: this.cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const logs = new LineRing();
    let resolveExit!: () => void;
    const inst: ExecInstance = {
      spec,
      child,
      port,
      logs,
      stopping: false,
      exited: false,
      exitCode: null,
      exitSignal: null,
      exit: new Promise<void>((r) => (resolveExit = r)),
    };
    this.instances.set(spec.instanceId, inst);
    if (child.pid !== undefined) this.record(spec.instanceId, child.pid, argv);
    child.stdout?.setEncoding('utf8').on('data', (c: string) => logs.write('stdout', c));
    child.stderr?.setEncoding('utf8').on('data', (c: string) => logs.write('stderr', c));

    let started = false;
    let spawnError: Error | null = null;
    child.once('error', (e) => {
      spawnError = e;
      if (!inst.exited) {
        // spawn failures (ENOENT, EACCES) emit 'error' and no 'exit'
        if (child.pid === undefined) {
          inst.exited = true;
          logs.write('stderr', `${e.message}\n`);
          resolveExit();
        }
      }
    });
    // 'exit' decides (a grandchild holding stdout open must not hide it); the output still in the
    // pipes is waited for up to 200 ms ('close') so the last lines are in the logs
    let closed = false;
    child.once('close', () => (closed = true));
    child.once('exit', (code, signal) => {
      if (inst.exited) return;
      const settled = closed ? Promise.resolve() : new Promise<void>((r) => {
        const t = setTimeout(r, 200);
        child.once('close', () => {
          clearTimeout(t);
          r();
        });
      });
      void settled.then(() => exited(code, signal));
    });
    const exited = (code: number | null, signal: NodeJS.Signals | null) => {
      if (inst.exited) return;
      inst.exited = true;
      inst.exitCode = code;
      inst.exitSignal = signal;
      this.unrecord(spec.instanceId);
      logs.flush();
      resolveExit();
      if (started && !inst.stopping) {
        this.logger.warn({ instanceId: spec.instanceId, code, signal }, 'exec runtime: instance exited on its own');
        const info: ExitInfo = { code };
        if (signal) info.error = `killed by ${signal}`;
        try {
          onExit(info);
        } catch (err) {
          this.logger.error({ err, instanceId: spec.instanceId }, 'exec runtime: onExit threw');
        }
      }
    };

    const failure = (why: string): Error => {
      const tail = logs.tail(20);
      return new Error(tail.length ? `${why}\n${tail.join('\n')}` : why);
    };
    const deadline = Date.now() + this.startTimeoutMs;
    for (;;) {
      if (inst.exited) {
        if (spawnError && child.pid === undefined) throw failure(`could not start ${cmd}: ${(spawnError as Error).message}`);
        const how = inst.exitSignal ? `signal ${inst.exitSignal}` : `code ${inst.exitCode}`;
        throw failure(`process exited with ${how} before listening on port ${port}`);
      }
      if (inst.stopping) throw failure('stopped while starting');
      if (child.pid !== undefined && (await tcpProbe(HOST, port, 1000))) break;
      if (Date.now() >= deadline) {
        await this.stop(spec.instanceId, 2000);
        throw failure(`process did not listen on port ${port} within ${this.startTimeoutMs} ms`);
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    if (inst.exited) throw failure(`process exited with code ${inst.exitCode} right after it started`);
    started = true;
    return { instanceId: spec.instanceId, host: HOST, port };
  }

  async stop(instanceId: string, timeoutMs = 10_000): Promise<void> {
    const inst = this.instances.get(instanceId);
    if (!inst || inst.exited) return;
    inst.stopping = true;
    inst.child.kill('SIGTERM');
    const timer = setTimeout(() => {
      if (!inst.exited) {
        this.logger.warn({ instanceId, timeoutMs }, 'exec runtime: instance ignored SIGTERM, sending SIGKILL');
        inst.child.kill('SIGKILL');
      }
    }, timeoutMs);
    try {
      await inst.exit;
    } finally {
      clearTimeout(timer);
    }
  }

  async remove(instanceId: string): Promise<void> {
    const inst = this.instances.get(instanceId);
    if (!inst) return;
    if (!inst.exited) await this.stop(instanceId);
    if (this.instances.get(instanceId) === inst) this.instances.delete(instanceId);
  }

  async logs(instanceId: string, tailLines: number): Promise<string> {
    const inst = this.instances.get(instanceId);
    return inst ? inst.logs.tail(tailLines).join('\n') : '';
  }

  async list(): Promise<Array<InstanceAddress & { serviceId: string; running: boolean }>> {
    return [...this.instances.values()].map((i) => ({ instanceId: i.spec.instanceId, host: HOST, port: i.port, serviceId: i.spec.serviceId, running: !i.exited, healthPath: i.spec.healthPath }));
  }

  /** The instance's process id while it runs (diagnostics, tests). */
  pid(instanceId: string): number | undefined {
    const inst = this.instances.get(instanceId);
    return inst && !inst.exited ? inst.child.pid : undefined;
  }

  async close(): Promise<void> {
    await Promise.all([...this.instances.keys()].map((id) => this.stop(id)));
  }
}
