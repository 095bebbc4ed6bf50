/**
 * nerfstudio: runs the ns-* CLIs of a pipeline spec (docs/api.md "nerfstudio pipeline spec",
 * src/domain/workflows/nerfstudio.ts) as child processes, the way a real install needs them:
 *
 *   download      data.source file_param (the agent fetched it), url (fetched here) or path
 *   process_data  ns-process-data <input_type> --data <capture> --output-dir <work>/processed
 *                   [typed flags: bare booleans, tyro without FlagConversionOff] [extra_args]
 *                   (images: --matching-method exhaustive unless asked: vocab_tree downloads)
 *                 success = transforms.json exists (the tool exits 0 on its caught errors)
 *   train         ns-train <method> [typed flags, `--flag True|False`] [extra_args]
 *                   --data <processed> --output-dir <work>/outputs --experiment-name gantry
 *                   --timestamp run --vis tensorboard [--load-dir <checkpoint>] [nerfstudio-data]
 *                 success = outputs/gantry/<method_name>/run/config.yml and a checkpoint;
 *                 every new checkpoint is archived and handed to ctx.checkpoints (the latest only)
 *   export        ns-export <gaussian-splat|pointcloud|poisson|tsdf|marching-cubes> --load-config
 *                   <config.yml> --output-dir <work>/export [--normal-method open3d ...]
 *                 success = the format's file (splat.ply, point_cloud.ply, poisson_mesh.ply, ...)
 *                 no export section: the checkpoint archive is the output
 *
 * Every CLI runs in its own process group (cancel signals the whole group: SIGTERM, then SIGKILL)
 * under `setpriv --pdeathsig SIGKILL` when util-linux has it, so it dies with the agent; with a
 * state dir each running group is recorded and reapLeftovers() kills what a killed agent left.
 * A failed stage's error is the tool's own message: the last meaningful lines of its stdout and
 * stderr (nerfstudio prints most failures on stdout), secrets redacted.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { copyFile, mkdir, readdir, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { nsMethod } from '../../domain/workflows/nerfstudio-methods.js';
import { ExecutorError, type ExecContext, type ExecOutput, type ExecResult, type Executor, type ProgressStage } from './types.js';
import { cancelledError, clamp01, describeOutput } from './util.js';
import { ToolOutput, extractTar, redactText, writeTar } from './ns-files.js';
import { parseNerfstudioSpec, type NerfstudioPlan } from './ns-plan.js';
import { ANSI, TrainOutputParser, stageError, type StageResult } from './ns-output.js';
import { CheckpointSaver, checkpointEntries, latestCheckpoint } from './ns-checkpoints.js';
import { acquireCapture, captureRoot, isFile, processInput } from './ns-capture.js';
import { WATCHDOG, findSetpriv, killGroup, resolveExecutable, startTimeOf } from './ns-process.js';

export { EXPORT_FILES, parseNerfstudioSpec, type ExportCommand, type NerfstudioPlan } from './ns-plan.js';
export { TrainOutputParser } from './ns-output.js';

export interface NerfstudioOptions {
  /** Directory holding ns-process-data, ns-train, ns-export. Default: resolve through PATH. */
  binDir?: string;
  /** Grace between SIGTERM and SIGKILL on cancel. Default 10 s. */
  killGraceMs?: number;
  /** Extra environment for the CLIs. */
  env?: Record<string, string>;
  /** Where running CLIs are recorded so that reapLeftovers() (a restarted agent) stops them. */
  stateDir?: string;
  /** How often the checkpoint folder is looked at during training. Default 1000 ms. */
  checkpointPollMs?: number;
  /** Path of setpriv (child dies with the agent); null = none; default: /usr/bin/setpriv or /bin/setpriv when present. */
  setpriv?: string | null;
}

/** The run's fixed names: outputs/<EXPERIMENT>/<method_name>/<TIMESTAMP>/config.yml (experiment_config.py get_base_dir). */
const EXPERIMENT = 'gantry';
const TIMESTAMP = 'run';

/** Stage weights of the overall 0..1 progress (upload, done by the agent, gets the rest). */
const SPAN: Record<Exclude<ProgressStage, 'upload'>, [number, number]> = {
  download: [0, 0.02],
  process_data: [0.02, 0.15],
  train: [0.15, 0.9],
  export: [0.9, 0.97],
};

interface StageRun {
  stage: ProgressStage;
  cmd: string;
  args: string[];
  onLine?: (line: string) => void;
  /** A non-zero exit is not a failure by itself (the caller judges by artefacts). */
  tolerateExit?: boolean;
}

export class NerfstudioExecutor implements Executor {
  readonly name = 'nerfstudio';
  private readonly binDir: string | undefined;
  private readonly killGraceMs: number;
  private readonly env: Record<string, string>;
  private readonly recordDir: string | null;
  private readonly pollMs: number;
  private readonly setpriv: string | null;
  private readonly running = new Set<ChildProcess>();

  constructor(opts: NerfstudioOptions = {}) {
    this.binDir = opts.binDir;
    this.killGraceMs = opts.killGraceMs ?? 10_000;
    this.env = opts.env ?? {};
    this.recordDir = opts.stateDir ? path.join(opts.stateDir, 'nerfstudio-running') : null;
    this.pollMs = opts.checkpointPollMs ?? 1000;
    this.setpriv = opts.setpriv === undefined ? findSetpriv() : opts.setpriv;
  }

  async close(): Promise<void> {
    for (const child of this.running) if (child.pid !== undefined) killGroup(child.pid, 'SIGKILL');
    this.running.clear();
  }

  /**
   * Kills the process groups a previous run of this agent left running (it was SIGKILLed while a
   * CLI ran): each recorded group whose leader is gone or is still the recorded process. Returns
   * how many groups were signalled.
   */
  reapLeftovers(): number {
    if (!this.recordDir) return 0;
    let files: string[] = [];
    try {
      files = readdirSync(this.recordDir).filter((f) => f.endsWith('.json'));
    } catch {
      return 0;
    }
    let n = 0;
    for (const f of files) {
      const file = path.join(this.recordDir, f);
      try {
        const r = JSON.parse(readFileSync(file, 'utf8')) as { pgid: number; start: string | null };
        const now = startTimeOf(r.pgid);
        // the leader alive with another start time: the pid was reused, not ours
        if (Number.isInteger(r.pgid) && r.pgid > 1 && (now === null || now === r.start)) {
          try {
            process.kill(-r.pgid, 'SIGKILL');
            n++;
          } catch {
            /* the group is gone */
          }
        }
      } catch {
        /* unreadable record */
      }
      try {
        unlinkSync(file);
      } catch {
        /* removed */
      }
    }
    return n;
  }

  private record(key: string, pgid: number): string | null {
    if (!this.recordDir) return null;
    try {
      mkdirSync(this.recordDir, { recursive: true });
      const file = path.join(this.recordDir, `${key.replace(/[^A-Za-z0-9_-]/g, '_')}-${pgid}.json`);
      writeFileSync(file, JSON.stringify({ pgid, start: startTimeOf(pgid) }));
      return file;
    } catch {
      return null;
    }
  }

  private bin(name: string): string {
    return this.binDir ? path.join(this.binDir, name) : name;
  }

  async run(ctx: ExecContext): Promise<ExecResult> {
    const plan = parseNerfstudioSpec(ctx.workflow);
    const spec = plan.spec;
    const redact = spec.data.url ? [spec.data.url] : [];
    if (ctx.signal.aborted) throw cancelledError();
    // ns-process-data runs COLMAP through shell strings with unquoted paths: give the tools a path without whitespace
    let work = path.resolve(ctx.workDir);
    let alias: string | null = null;
    if (/\s/.test(work)) {
      alias = path.join(os.tmpdir(), `gantry-ns-${ctx.taskId.replace(/[^A-Za-z0-9_-]/g, '_')}-${process.pid}-${Date.now().toString(36)}`);
      await symlink(work, alias, 'dir');
      work = alias;
    }
    try {
      return await this.runIn(ctx, plan, work, redact);
    } finally {
      if (alias) await rm(alias, { force: true }).catch(() => undefined);
    }
  }

  private async runIn(ctx: ExecContext, plan: NerfstudioPlan, work: string, redact: string[]): Promise<ExecResult> {
    const spec = plan.spec;
    const tick = (stage: Exclude<ProgressStage, 'upload'>, within: number, step: number, total: number, node: string, message: string): void => {
      const [a, b] = SPAN[stage];
      ctx.onProgress({ progress: a + (b - a) * clamp01(within), step_current: step, step_total: total, current_node: node, stage, message });
    };

    // download: the capture
    const capture = await acquireCapture(ctx, work, spec, redact);
    tick('download', 1, 1, 1, 'download', `capture ready: ${path.basename(capture)}`);
    const root = await captureRoot(work, capture, (zip, dest) => this.unzip(ctx, zip, dest));

    // resume: the checkpoint an earlier attempt left
    let resume: { loadDir: string; step: number; dir: string } | null = null;
    const store = ctx.checkpoints;
    if (store && store.resumeStep !== null) {
      const dir = path.join(work, 'resume');
      try {
        await mkdir(dir, { recursive: true });
        const tar = path.join(work, 'resume.tar');
        await store.download(tar, ctx.signal);
        await extractTar(tar, dir);
        await rm(tar, { force: true });
        const models = path.join(dir, 'nerfstudio_models');
        if ((await readdir(models)).some((f) => f.endsWith('.ckpt'))) resume = { loadDir: models, step: store.resumeStep, dir };
      } catch (e) {
        if (ctx.signal.aborted) throw cancelledError();
        ctx.log(`nerfstudio: the checkpoint of step ${store.resumeStep} could not be restored, training from step 0: ${redactText((e as Error).message)}`);
      }
    }

    // process_data
    let dataDir: string;
    if (!plan.process) {
      if (!(await isFile(path.join(root.dir, 'transforms.json')))) {
        throw new ExecutorError('bad_input', 'the capture is not a processed nerfstudio dataset (no transforms.json at its top level); add a process_data section to the workflow');
      }
      dataDir = root.dir;
      tick('process_data', 1, 1, 1, 'ns-process-data', 'the capture is a nerfstudio dataset; ns-process-data not needed');
    } else {
      dataDir = path.join(work, 'processed');
      const inputArgs = await processInput(plan.process.inputType, root, dataDir, spec.process_data?.skip_colmap === true);
      tick('process_data', 0, 0, 1, 'ns-process-data', `ns-process-data ${plan.process.inputType}: started`);
      let doneLines = 0;
      const res = await this.runStage(ctx, {
        stage: 'process_data',
        cmd: this.bin('ns-process-data'),
        args: [plan.process.inputType, ...inputArgs, '--output-dir', dataDir, ...plan.process.flags],
        tolerateExit: true,
        onLine: (line) => {
          const clean = line.replace(ANSI, '').replace(/^\[\d\d:\d\d:\d\d\]\s*/, '').replace(/\s{2,}\S+\.py:\d+\s*$/, '').trim();
          if (/\bDone\b|All DONE|CONGRATS|Number of frames|Starting with/.test(clean)) {
            doneLines++;
            tick('process_data', Math.min(0.9, doneLines / 8), 0, 1, 'ns-process-data', clean);
          }
        },
      });
      // process_data.py entrypoint exits 0 on its caught errors: transforms.json is the proof
      if (res.code !== 0 || !(await isFile(path.join(dataDir, 'transforms.json')))) {
        throw stageError('ns-process-data', res, res.code === 0 ? 'finished without writing transforms.json' : undefined, redact);
      }
      if (resume) {
        // the checkpoint was trained on these camera poses: keep them (a new COLMAP run may differ)
        for (const f of ['transforms.json', 'sparse_pc.ply']) {
          const saved = path.join(resume.dir, 'processed', f);
          if (await isFile(saved)) await copyFile(saved, path.join(dataDir, f));
        }
      }
      tick('process_data', 1, 1, 1, 'ns-process-data', 'ns-process-data finished');
    }

    // train
    const total = plan.iterations;
    const outputsDir = path.join(work, 'outputs');
    const methodName = nsMethod(plan.method)?.methodName ?? plan.method;
    const runDir = path.join(outputsDir, EXPERIMENT, methodName, TIMESTAMP);
    const first = resume ? Math.min(resume.step + 1, total) : 0;
    tick('train', first / total, first, total, 'ns-train', resume ? `ns-train ${plan.method}: resuming after the checkpoint of step ${resume.step} (${total} iterations)` : `ns-train ${plan.method}: starting (${total} iterations)`);
    const parser = new TrainOutputParser();
    const saver = new CheckpointSaver(ctx, work, runDir, dataDir, plan.process !== null, this.pollMs);
    const res = await this.runStage(ctx, {
      stage: 'train',
      cmd: this.bin('ns-train'),
      args: [
        plan.method,
        ...plan.trainFlags,
        '--data',
        dataDir,
        '--output-dir',
        outputsDir,
        '--experiment-name',
        EXPERIMENT,
        '--timestamp',
        TIMESTAMP,
        '--vis',
        'tensorboard',
        '--viewer.quit-on-train-completion',
        'True',
        ...(resume ? ['--load-dir', resume.loadDir] : []),
        ...(plan.dataparser ? [plan.dataparser] : []),
      ],
      tolerateExit: true,
      onLine: (line) => {
        const row = parser.line(line);
        if (!row || row.step <= parser.lastStep) return;
        parser.lastStep = row.step;
        saver.sawStep(row.step);
        const eta = row.columns['ETA (time)'];
        tick('train', row.step / total, row.step, total, 'ns-train', `step ${row.step}/${total} (${((row.step / total) * 100).toFixed(2)}%)${eta ? `, ETA ${eta}` : ''}`);
      },
    }).finally(() => saver.stop());
    const config = path.join(runDir, 'config.yml');
    const ckpt = await latestCheckpoint(path.join(runDir, 'nerfstudio_models'));
    if (res.code !== 0 || !(await isFile(config)) || !ckpt) {
      throw stageError('ns-train', res, res.code === 0 ? `finished without ${!(await isFile(config)) ? 'config.yml' : 'a checkpoint'} in ${path.relative(work, runDir)}` : undefined, redact);
    }
    await saver.flush();
    tick('train', 1, total, total, 'ns-train', `training finished (${total} iterations)`);

    // export
    if (!plan.export) {
      const archive = path.join(work, 'checkpoint.tar');
      await writeTar(archive, await checkpointEntries(runDir, ckpt, dataDir, plan.process !== null));
      return { outputs: [await describeOutput(archive, 'checkpoint.tar', 'application/x-tar')] };
    }
    const exportDir = path.join(work, 'export');
    const ex = plan.export;
    tick('export', 0, 0, 1, 'ns-export', `ns-export ${ex.command}: started`);
    const er = await this.runStage(ctx, { stage: 'export', cmd: this.bin('ns-export'), args: [ex.command, '--load-config', config, '--output-dir', exportDir, ...ex.flags], tolerateExit: true });
    if (er.code !== 0 || !(await isFile(path.join(exportDir, ex.primary)))) {
      throw stageError('ns-export', er, er.code === 0 ? `finished without ${ex.primary}` : undefined, redact);
    }
    const outputs = await collectExports(exportDir, ex.primary);
    tick('export', 1, 1, 1, 'ns-export', `exported ${outputs[0]!.name} (${outputs[0]!.size} bytes)`);
    return { outputs };
  }

  private async unzip(ctx: ExecContext, zip: string, dest: string): Promise<void> {
    const attempts: StageRun[] = [
      { stage: 'download', cmd: 'unzip', args: ['-q', '-o', zip, '-d', dest] },
      { stage: 'download', cmd: 'python3', args: ['-m', 'zipfile', '-e', zip, dest] },
    ];
    let last = '';
    for (const a of attempts) {
      try {
        const r = await this.runStage(ctx, a);
        if (r.code === 0) return;
      } catch (err) {
        if (err instanceof ExecutorError && err.code === 'cancelled') throw err;
        last = (err as Error).message;
      }
    }
    throw new ExecutorError('bad_input', `could not extract ${path.basename(zip)}: ${last}`);
  }

  /** Spawns one CLI in its own process group (dying with the agent); resolves with its exit and output. */
  private runStage(ctx: ExecContext, s: StageRun): Promise<StageResult> {
    const name = path.basename(s.cmd);
    ctx.log(`nerfstudio: ${name} ${s.args.join(' ')}`, { stage: s.stage });
    return new Promise<StageResult>((resolve, reject) => {
      if (ctx.signal.aborted) {
        reject(cancelledError());
        return;
      }
      if (this.setpriv && !resolveExecutable(s.cmd)) {
        // setpriv would report the missing tool as its own exit 127
        reject(new ExecutorError('tool_error', `cannot start ${name}: not found${this.binDir ? ` in ${this.binDir}` : ' on PATH'}; is nerfstudio installed?`));
        return;
      }
      const [cmd, args] = this.setpriv ? [this.setpriv, ['--pdeathsig', 'SIGKILL', '--', s.cmd, ...s.args]] : [s.cmd, s.args];
      let child: ChildProcess;
      try {
        child = spawn(cmd, args, {
          cwd: path.resolve(ctx.workDir),
          detached: true,
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { ...process.env, ...this.env, PYTHONUNBUFFERED: '1', TERM: process.env.TERM ?? 'dumb' },
        });
      } catch (err) {
        reject(new ExecutorError('tool_error', `cannot start ${name}: ${(err as Error).message}`, { cause: err }));
        return;
      }
      this.running.add(child);
      const recordFile = child.pid !== undefined ? this.record(ctx.taskId, child.pid) : null;
      // setpriv kills the CLI itself with the agent; the watchdog takes the rest of its group
      let watchdog: ChildProcess | null = null;
      if (child.pid !== undefined) {
        try {
          watchdog = spawn(process.execPath, ['-e', WATCHDOG, String(child.pid)], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
          watchdog.on('error', () => undefined);
          watchdog.stdin?.on('error', () => undefined);
        } catch {
          watchdog = null;
        }
      }
      const output = new ToolOutput();
      let cancelled = false;
      let killTimer: NodeJS.Timeout | undefined;
      let exitTimer: NodeJS.Timeout | undefined;
      let settled = false;
      let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;

      const onAbort = (): void => {
        if (cancelled || child.pid === undefined) return;
        cancelled = true;
        ctx.log(`nerfstudio: cancelling ${name} (pgid ${child.pid})`);
        killGroup(child.pid, 'SIGTERM');
        killTimer = setTimeout(() => {
          if (child.pid !== undefined) killGroup(child.pid, 'SIGKILL');
        }, this.killGraceMs);
      };
      ctx.signal.addEventListener('abort', onAbort, { once: true });

      let partial = '';
      child.stdout?.on('data', (chunk: Buffer) => {
        const text = chunk.toString('utf8');
        output.push('stdout', text);
        const parts = (partial + text).split(/\r\n|\r|\n/);
        partial = (parts.pop() ?? '').slice(-65_536);
        if (s.onLine) for (const l of parts) if (l) s.onLine(l);
      });
      child.stderr?.on('data', (c: Buffer) => output.push('stderr', c.toString('utf8')));

      const cleanup = (): void => {
        watchdog?.kill('SIGKILL');
        if (killTimer) clearTimeout(killTimer);
        if (exitTimer) clearTimeout(exitTimer);
        ctx.signal.removeEventListener('abort', onAbort);
        this.running.delete(child);
        if (recordFile) {
          try {
            unlinkSync(recordFile);
          } catch {
            /* gone */
          }
        }
      };
      const finish = (): void => {
        if (settled) return;
        settled = true;
        if (partial && s.onLine) s.onLine(partial);
        cleanup();
        // Whatever is left of the group (orphaned workers) goes too.
        if (child.pid !== undefined) killGroup(child.pid, 'SIGKILL');
        if (cancelled) {
          reject(cancelledError());
          return;
        }
        const r: StageResult = { code: exit?.code ?? null, signal: exit?.signal ?? null, output };
        if (r.code === 0 || s.tolerateExit) resolve(r);
        else reject(stageError(name, r, undefined, []));
      };

      child.on('error', (err: NodeJS.ErrnoException) => {
        if (settled) return;
        settled = true;
        cleanup();
        const hint = err.code === 'ENOENT' ? ` (not found${this.binDir ? ` in ${this.binDir}` : ' on PATH'}; is nerfstudio installed?)` : '';
        reject(new ExecutorError('tool_error', `cannot start ${name}: ${err.message}${hint}`, { cause: err }));
      });
      child.on('exit', (code, signal) => {
        exit = { code, signal };
        // Output pipes may be held open by orphaned grandchildren; don't wait for them forever.
        exitTimer = setTimeout(finish, 2_000);
      });
      child.on('close', (code, signal) => {
        exit ??= { code, signal };
        finish();
      });
    });
  }
}

async function collectExports(exportDir: string, primary: string): Promise<ExecOutput[]> {
  const entries = await readdir(exportDir, { withFileTypes: true }).catch(() => []);
  const files = entries.filter((e) => e.isFile()).map((e) => e.name);
  const ordered = [...files].sort((a, b) => (a === primary ? -1 : b === primary ? 1 : a.localeCompare(b)));
  const outputs: ExecOutput[] = [];
  for (const f of ordered) outputs.push(await describeOutput(path.join(exportDir, f)));
  return outputs;
}
