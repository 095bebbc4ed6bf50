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
import { accessSync, constants as fsc, mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { copyFile, link, mkdir, readdir, rm, stat, symlink } from 'node:fs/promises';
import { createWriteStream } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { flagKey, nerfstudioSpecSchema, defaultExportFormat, type NerfstudioSpec as SpecShape } from '../../domain/workflows/nerfstudio.js';
import { nsDataparserToAppend, nsMethod } from '../../domain/workflows/nerfstudio-methods.js';
import { ExecutorError, type ExecContext, type ExecOutput, type ExecResult, type Executor, type ProgressStage } from './types.js';
import { cancelledError, clamp01, describeOutput } from './util.js';
import { ToolOutput, extractTar, redactText, writeTar } from './ns-files.js';

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

/**
 * The watchdog beside each CLI: a tiny node process holding a pipe from the agent. When the agent
 * dies the pipe closes and it SIGKILLs the CLI's whole process group (workers included), unless the
 * group leader is no longer the process it was given (start time: a reused pid is not ours).
 */
const WATCHDOG = `
const fs = require('node:fs');
const pgid = Number(process.argv[1]);
const start = (p) => { try { const s = fs.readFileSync('/proc/' + p + '/stat', 'utf8'); return s.slice(s.lastIndexOf(')') + 2).split(' ')[19]; } catch { return null; } };
const was = start(pgid);
process.stdin.on('data', () => {});
process.stdin.on('end', () => { const now = start(pgid); if (now === null || now === was) { try { process.kill(-pgid, 'SIGKILL'); } catch {} } process.exit(0); });
process.stdin.on('error', () => process.stdin.emit('end'));
`;

/** The run's fixed names: outputs/<EXPERIMENT>/<method_name>/<TIMESTAMP>/config.yml (experiment_config.py get_base_dir). */
const EXPERIMENT = 'gantry';
const TIMESTAMP = 'run';
const VIDEO_EXT = new Set(['.mp4', '.mov', '.avi', '.mkv', '.webm', '.m4v', '.mpg', '.mpeg']);
const IMAGE_EXT = new Set(['.jpg', '.jpeg', '.png', '.tif', '.tiff', '.cr2']);

/** Stage weights of the overall 0..1 progress (upload, done by the agent, gets the rest). */
const SPAN: Record<Exclude<ProgressStage, 'upload'>, [number, number]> = {
  download: [0, 0.02],
  process_data: [0.02, 0.15],
  train: [0.15, 0.9],
  export: [0.9, 0.97],
};

export type ExportCommand = 'gaussian-splat' | 'pointcloud' | 'poisson' | 'tsdf' | 'marching-cubes';
/** exporter.py: the file each command writes. */
export const EXPORT_FILES: Record<ExportCommand, string> = {
  'gaussian-splat': 'splat.ply',
  pointcloud: 'point_cloud.ply',
  poisson: 'poisson_mesh.ply',
  tsdf: 'tsdf_mesh.ply',
  'marching-cubes': 'sdf_marching_cubes_mesh.ply',
};

/** What the executor runs for a spec (pure: no I/O). */
export interface NerfstudioPlan {
  spec: SpecShape;
  method: string;
  /** ns-train's max_num_iterations (extra_args, else the typed field, else the method's default). */
  iterations: number;
  /** ns-process-data subcommand and its flags (without --data/--output-dir), or null. */
  process: { inputType: string; flags: string[] } | null;
  /** ns-train flags (typed fields and extra_args; without the executor's own). */
  trainFlags: string[];
  /** A dataparser subcommand appended to ns-train (vanilla-nerf, tensorf: nerfstudio-data). */
  dataparser: string | null;
  export: { command: ExportCommand; flags: string[]; primary: string } | null;
}

type Extra = Record<string, string | number | boolean> | undefined;

/** extra_args as flags; booleans as `--flag True|False` (FlagConversionOff) or bare `--flag`/`--no-flag`. */
function extraFlags(extra: Extra, bareBooleans: boolean, skip: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(extra ?? {})) {
    if (skip.has(flagKey(k))) continue;
    const name = k.replace(/^-+/, '');
    if (typeof v === 'boolean') {
      if (bareBooleans) out.push(v ? `--${name}` : `--no-${name}`);
      else out.push(`--${name}`, v ? 'True' : 'False');
    } else out.push(`--${name}`, String(v));
  }
  return out;
}

const extraValue = (extra: Extra, flag: string): string | number | boolean | undefined => {
  for (const [k, v] of Object.entries(extra ?? {})) if (flagKey(k) === flag) return v;
  return undefined;
};

/** Validates the spec (the node already did; a bad one is bad_input) and plans the three CLIs. */
export function parseNerfstudioSpec(workflow: unknown): NerfstudioPlan {
  const r = nerfstudioSpecSchema.safeParse(workflow);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new ExecutorError('bad_input', `invalid nerfstudio pipeline spec: ${(i?.path ?? []).join('.') || '(root)'}: ${i?.message ?? 'invalid'}`);
  }
  const spec = r.data;
  const m = nsMethod(spec.method);
  const pd = spec.process_data;
  let process: NerfstudioPlan['process'] = null;
  if (pd) {
    const f: string[] = [];
    const colmap = pd.input_type === 'images' || pd.input_type === 'video';
    if (pd.camera_type !== undefined) f.push('--camera-type', pd.camera_type);
    // images default to vocab_tree, whose vocabulary is downloaded on first use (colmap_utils.get_vocab_tree)
    const matching = pd.matching_method ?? (pd.input_type === 'images' && extraValue(pd.extra_args, 'matching-method') === undefined ? 'exhaustive' : undefined);
    if (matching !== undefined) f.push('--matching-method', matching);
    if (pd.sfm_tool !== undefined) f.push('--sfm-tool', pd.sfm_tool);
    if (pd.num_frames_target !== undefined) f.push('--num-frames-target', String(pd.num_frames_target));
    if (pd.num_downscales !== undefined) f.push('--num-downscales', String(pd.num_downscales));
    if (pd.skip_colmap !== undefined && colmap) f.push(pd.skip_colmap ? '--skip-colmap' : '--no-skip-colmap');
    process = { inputType: pd.input_type, flags: dedupe(f, extraFlags(pd.extra_args, true, new Set())) };
  }
  const tr = spec.train;
  const iterations = Number(extraValue(tr?.extra_args, 'max-num-iterations') ?? tr?.max_num_iterations ?? m?.maxNumIterations ?? 30000);
  const t: string[] = ['--max-num-iterations', String(iterations)];
  if (tr?.steps_per_save !== undefined) t.push('--steps-per-save', String(tr.steps_per_save));
  if (tr?.mixed_precision !== undefined) t.push('--mixed-precision', tr.mixed_precision ? 'True' : 'False');
  if (tr?.seed !== undefined) t.push('--machine.seed', String(tr.seed));
  const trainFlags = dedupe(t, extraFlags(tr?.extra_args, false, new Set(['max-num-iterations'])));

  let exp: NerfstudioPlan['export'] = null;
  const ex = spec.export;
  if (ex) {
    const format = ex.format ?? defaultExportFormat(spec.method);
    const command: ExportCommand = format === 'mesh' ? (ex.mesh_method ?? 'poisson') : format;
    const f: string[] = [];
    // pointcloud/poisson default to --normal-method model_output, which fails for a model without normals (exporter.py validate_pipeline)
    if (command === 'pointcloud' || command === 'poisson') f.push('--normal-method', ex.normal_method ?? 'open3d');
    if (ex.num_points !== undefined) f.push('--num-points', String(ex.num_points));
    if (ex.remove_outliers !== undefined) f.push('--remove-outliers', ex.remove_outliers ? 'True' : 'False');
    if (ex.target_num_faces !== undefined && (command === 'poisson' || command === 'tsdf')) f.push('--target-num-faces', String(ex.target_num_faces));
    const flags = dedupe(f, extraFlags(ex.extra_args, false, new Set()));
    const named = extraValue(ex.extra_args, 'output-filename');
    exp = { command, flags, primary: command === 'gaussian-splat' && typeof named === 'string' ? path.basename(named) : EXPORT_FILES[command] };
  }
  return { spec, method: spec.method, iterations, process, trainFlags, dataparser: nsDataparserToAppend(spec.method), export: exp };
}

/** Typed flags, then extra_args; an extra flag replaces the typed flag of the same name (tyro takes the last, but one is clearer). */
function dedupe(typed: string[], extra: string[]): string[] {
  const extraNames = new Set(extra.filter((a) => a.startsWith('--')).map((a) => flagKey(a).replace(/^no-/, '')));
  const out: string[] = [];
  for (let i = 0; i < typed.length; i++) {
    const a = typed[i] as string;
    const takesValue = typed[i + 1] !== undefined && !(typed[i + 1] as string).startsWith('--');
    if (a.startsWith('--') && extraNames.has(flagKey(a).replace(/^no-/, ''))) {
      if (takesValue) i++;
      continue;
    }
    out.push(a);
  }
  return [...out, ...extra];
}

const ANSI = /\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07/g;
const STEP_ROW = /^\s*(\d+)\s+\((\d+(?:\.\d+)?)%\)/;

/** Parses LocalWriter's table rows ("1230 (12.30%)    45.123 ms   3 m, 12 s ..."). */
export class TrainOutputParser {
  private header: string[] | undefined;
  lastStep = -1;

  /** Returns a parsed row for a line, or undefined. ANSI/cursor escapes are stripped. */
  line(raw: string): { step: number; percent: number; columns: Record<string, string> } | undefined {
    const line = raw.replace(ANSI, '').replace(/\s+$/, '');
    if (line.startsWith('Step (% Done)')) {
      this.header = line.split(/\s{2,}/).slice(1);
      return undefined;
    }
    const m = STEP_ROW.exec(line);
    if (!m) return undefined;
    const step = Number(m[1]);
    const percent = Number(m[2]);
    const cells = line.trim().split(/\s{2,}/).slice(1);
    const columns: Record<string, string> = {};
    this.header?.forEach((h, i) => {
      const c = cells[i];
      if (c !== undefined) columns[h] = c;
    });
    return { step, percent, columns };
  }
}

interface StageRun {
  stage: ProgressStage;
  cmd: string;
  args: string[];
  onLine?: (line: string) => void;
  /** A non-zero exit is not a failure by itself (the caller judges by artefacts). */
  tolerateExit?: boolean;
}

interface StageResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: ToolOutput;
}

/** The executable a command name runs (a path, or the first match on PATH), or null. */
function resolveExecutable(cmd: string): string | null {
  const candidates = cmd.includes('/') ? [cmd] : (process.env.PATH ?? '').split(path.delimiter).filter(Boolean).map((d) => path.join(d, cmd));
  for (const c of candidates) {
    try {
      accessSync(c, fsc.X_OK);
      return c;
    } catch {
      /* next */
    }
  }
  return null;
}

function findSetpriv(): string | null {
  for (const p of ['/usr/bin/setpriv', '/bin/setpriv', '/usr/sbin/setpriv']) {
    try {
      accessSync(p, fsc.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return null;
}

/** /proc/<pid>/stat field 22 (start time in clock ticks): tells a recorded process from a reused pid. */
function startTimeOf(pid: number): string | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
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
    const capture = await this.acquire(ctx, work, spec, redact);
    tick('download', 1, 1, 1, 'download', `capture ready: ${path.basename(capture)}`);
    const root = await this.captureRoot(ctx, work, capture);

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
      const inputArgs = await this.processInput(plan.process.inputType, root, dataDir, spec.process_data?.skip_colmap === true);
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

  /** The capture as a local file or directory, by data.source. */
  private async acquire(ctx: ExecContext, work: string, spec: SpecShape, redact: string[]): Promise<string> {
    const d = spec.data;
    if (d.source === 'path') {
      const p = path.resolve(d.path ?? '');
      if (!(await stat(p).catch(() => null))) throw new ExecutorError('bad_input', `data.path ${p} does not exist on this agent`);
      return p;
    }
    if (d.source === 'url') return this.download(ctx, work, d.url ?? '', redact);
    const files = ctx.inputFiles.filter((f) => f.targetPath === undefined || f.targetPath === 'data.file_key');
    if (files.length === 0) throw new ExecutorError('bad_input', 'the task has no capture file (the parameter targeting data.file_key)');
    if (files.length === 1) {
      const f = files[0]!;
      // keep the uploaded name's extension (the agent names its download <i>-<name>)
      return f.localPath;
    }
    const dir = path.join(work, 'input', 'images');
    await mkdir(dir, { recursive: true });
    for (const [i, f] of files.entries()) await linkOrCopy(f.localPath, path.join(dir, `${i}_${path.basename(f.fileName || f.localPath)}`));
    return dir;
  }

  private async download(ctx: ExecContext, work: string, url: string, redact: string[]): Promise<string> {
    const shown = redactText(url, redact);
    ctx.onProgress({ progress: 0, step_current: 0, step_total: 1, current_node: 'download', stage: 'download', message: `downloading ${shown}` });
    let res: Response;
    try {
      res = await fetch(url, { signal: ctx.signal, redirect: 'follow' });
    } catch (e) {
      if (ctx.signal.aborted) throw cancelledError();
      throw new ExecutorError('bad_input', `data.url ${shown}: ${redactText((e as Error).message, redact)}`);
    }
    if (!res.ok || !res.body) throw new ExecutorError('bad_input', `data.url ${shown}: HTTP ${res.status}`);
    const dir = path.join(work, 'download');
    await mkdir(dir, { recursive: true });
    let name = path.basename(new URL(res.url || url).pathname).replace(/[^A-Za-z0-9._-]/g, '_') || 'capture';
    if (!path.extname(name) && /zip/.test(res.headers.get('content-type') ?? '')) name += '.zip';
    const dest = path.join(dir, name);
    try {
      await pipeline(Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), createWriteStream(dest));
    } catch (e) {
      if (ctx.signal.aborted) throw cancelledError();
      throw new ExecutorError('bad_input', `data.url ${shown}: ${redactText((e as Error).message, redact)}`);
    }
    return dest;
  }

  /** Extracts a zip (descending through a single top folder); a directory or a single file is used as it is. */
  private async captureRoot(ctx: ExecContext, work: string, capture: string): Promise<{ dir: string; file: string | null }> {
    const st = await stat(capture);
    if (st.isDirectory()) return { dir: capture, file: null };
    const isZip = path.extname(capture).toLowerCase() === '.zip' || (await zipMagic(capture));
    if (!isZip) {
      const ext = path.extname(capture).toLowerCase();
      if (IMAGE_EXT.has(ext)) {
        const dir = path.join(work, 'input', 'images');
        await mkdir(dir, { recursive: true });
        await linkOrCopy(capture, path.join(dir, path.basename(capture)));
        return { dir, file: null };
      }
      return { dir: path.dirname(capture), file: capture };
    }
    const dest = path.join(work, 'input');
    await mkdir(dest, { recursive: true });
    await this.unzip(ctx, capture, dest);
    let root = dest;
    for (;;) {
      const entries = (await readdir(root, { withFileTypes: true })).filter((e) => !e.name.startsWith('.') && e.name !== '__MACOSX');
      const only = entries[0];
      if (entries.length === 1 && only && only.isDirectory()) root = path.join(root, only.name);
      else break;
    }
    return { dir: root, file: null };
  }

  /** The --data (and --xml / --csv) of ns-process-data for an input type, from the capture's layout. */
  private async processInput(inputType: string, root: { dir: string; file: string | null }, processed: string, skipColmap: boolean): Promise<string[]> {
    if (inputType === 'video') {
      if (root.file) return ['--data', root.file];
      const videos = (await findFiles(root.dir, (n) => VIDEO_EXT.has(path.extname(n).toLowerCase()), 2)).sort();
      if (videos.length !== 1) throw new ExecutorError('bad_input', `input_type video needs one video file in the capture, found ${videos.length}`);
      return ['--data', videos[0]!];
    }
    if (root.file) throw new ExecutorError('bad_input', `input_type ${inputType} needs a folder or a zip, got the file ${path.basename(root.file)}`);
    const imagesDir = async (): Promise<string> => ((await hasImages(path.join(root.dir, 'images'))) ? path.join(root.dir, 'images') : root.dir);
    if (inputType === 'images') {
      if (skipColmap) {
        // --skip-colmap reads <output-dir>/colmap/sparse/0 (colmap_converter_to_nerfstudio_dataset.py): bring the capture's model
        for (const rel of [['colmap', 'sparse', '0'], ['sparse', '0']]) {
          const src = path.join(root.dir, ...rel);
          if (await isFile(path.join(src, 'cameras.bin'))) {
            const dst = path.join(processed, 'colmap', 'sparse', '0');
            await mkdir(dst, { recursive: true });
            for (const f of await readdir(src)) await copyFile(path.join(src, f), path.join(dst, f));
            break;
          }
        }
      }
      return ['--data', await imagesDir()];
    }
    if (inputType === 'metashape' || inputType === 'realitycapture') {
      const ext = inputType === 'metashape' ? '.xml' : '.csv';
      const found = await findFiles(root.dir, (n) => path.extname(n).toLowerCase() === ext, 2);
      if (found.length !== 1) throw new ExecutorError('bad_input', `input_type ${inputType} needs exactly one ${ext} camera export in the capture, found ${found.length}`);
      return ['--data', await imagesDir(), inputType === 'metashape' ? '--xml' : '--csv', found[0]!];
    }
    return ['--data', root.dir]; // polycam, record3d, odm: the export folder as the app wrote it
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

/** The task error of a failed stage: how it ended and the tool's own last meaningful lines. */
function stageError(name: string, r: StageResult, what: string | undefined, redact: readonly string[]): ExecutorError {
  const how = what ?? (r.code !== null ? `exited with code ${r.code}` : `was killed by ${r.signal ?? 'a signal'}`);
  const tail = r.output.tail(15, redact);
  const stage = name === 'ns-process-data' ? 'process_data' : name === 'ns-train' ? 'train' : name === 'ns-export' ? 'export' : 'download';
  return new ExecutorError('tool_error', `${name} ${how}${tail ? `:\n${tail}` : ''}`, { details: { stage, exit_code: r.code, signal: r.signal } });
}

/**
 * Watches the run's nerfstudio_models/ during training and hands each new checkpoint to the
 * store, one upload at a time, the newest pending one only. A step-N.ckpt is taken once the trainer
 * logged a later step (Trainer.train saves it inside step N, before going on) or has exited; it is
 * hard-linked first, since save_only_latest_checkpoint deletes it at the next save.
 */
class CheckpointSaver {
  private timer: NodeJS.Timeout | null = null;
  private lastRow = -1;
  private uploaded = -1;
  private busy: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(
    private readonly ctx: ExecContext,
    private readonly work: string,
    private readonly runDir: string,
    private readonly dataDir: string,
    private readonly processed: boolean,
    pollMs: number,
  ) {
    if (!ctx.checkpoints) return;
    this.uploaded = ctx.checkpoints.resumeStep ?? -1;
    this.timer = setInterval(() => this.poll(false), pollMs);
    this.timer.unref();
  }

  sawStep(step: number): void {
    this.lastRow = Math.max(this.lastRow, step);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** After training: nothing more is uploaded (the run's end is the output or the export's input); waits for an upload in flight. */
  async flush(): Promise<void> {
    await this.busy;
  }

  private poll(final: boolean): void {
    if (this.stopped) return;
    const store = this.ctx.checkpoints;
    if (!store) return;
    this.busy = this.busy.then(async () => {
      const ckpt = await latestCheckpoint(path.join(this.runDir, 'nerfstudio_models'));
      if (!ckpt || ckpt.step <= this.uploaded || (ckpt.step >= this.lastRow && !final)) return;
      const staging = path.join(this.work, 'checkpoint-staging');
      await rm(staging, { recursive: true, force: true });
      await mkdir(path.join(staging, 'nerfstudio_models'), { recursive: true });
      const held = path.join(staging, 'nerfstudio_models', path.basename(ckpt.path));
      try {
        await link(ckpt.path, held);
      } catch {
        return; // deleted by a newer save: the next poll takes that one
      }
      const archive = path.join(this.work, 'checkpoint-upload.tar');
      try {
        await writeTar(archive, await checkpointEntries(this.runDir, { path: held, step: ckpt.step }, this.dataDir, this.processed));
        await store.upload(archive, ckpt.step, this.ctx.signal);
        this.uploaded = ckpt.step;
        this.ctx.log(`nerfstudio: checkpoint of step ${ckpt.step} uploaded`);
      } catch (e) {
        this.ctx.log(`nerfstudio: checkpoint of step ${ckpt.step} not uploaded: ${redactText((e as Error).message)}`);
      } finally {
        await rm(archive, { force: true });
        await rm(staging, { recursive: true, force: true });
      }
    });
  }
}

/** The checkpoint archive: config.yml, the .ckpt, and what a resume or a later export needs. */
async function checkpointEntries(runDir: string, ckpt: { path: string; step: number }, dataDir: string, processed: boolean): Promise<Array<{ name: string; path: string }>> {
  const entries = [
    { name: 'config.yml', path: path.join(runDir, 'config.yml') },
    { name: `nerfstudio_models/${path.basename(ckpt.path)}`, path: ckpt.path },
  ];
  const optional = [
    { name: 'dataparser_transforms.json', path: path.join(runDir, 'dataparser_transforms.json') },
    ...(processed
      ? [
          { name: 'processed/transforms.json', path: path.join(dataDir, 'transforms.json') },
          { name: 'processed/sparse_pc.ply', path: path.join(dataDir, 'sparse_pc.ply') },
        ]
      : []),
  ];
  for (const o of optional) if (await isFile(o.path)) entries.push(o);
  return entries;
}

async function latestCheckpoint(dir: string): Promise<{ path: string; step: number } | null> {
  const files = await readdir(dir).catch(() => [] as string[]);
  let best: { path: string; step: number } | null = null;
  for (const f of files) {
    const m = /^step-(\d+)\.ckpt$/.exec(f);
    if (m && (!best || Number(m[1]) > best.step)) best = { path: path.join(dir, f), step: Number(m[1]) };
  }
  return best;
}

const isFile = async (p: string): Promise<boolean> => (await stat(p).catch(() => null))?.isFile() ?? false;
const hasImages = async (dir: string): Promise<boolean> => (await readdir(dir).catch(() => [] as string[])).some((f) => IMAGE_EXT.has(path.extname(f).toLowerCase()));

async function zipMagic(file: string): Promise<boolean> {
  try {
    const { open } = await import('node:fs/promises');
    const fh = await open(file, 'r');
    try {
      const b = Buffer.alloc(4);
      await fh.read(b, 0, 4, 0);
      return b.equals(Buffer.from([0x50, 0x4b, 0x03, 0x04]));
    } finally {
      await fh.close();
    }
  } catch {
    return false;
  }
}

async function findFiles(dir: string, pred: (name: string) => boolean, depth: number): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string, left: number): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      if (e.name.startsWith('.') || e.name === '__MACOSX') continue;
      const p = path.join(d, e.name);
      if (e.isFile() && pred(e.name)) out.push(p);
      else if (e.isDirectory() && left > 0) await walk(p, left - 1);
    }
  };
  await walk(dir, depth);
  return out;
}

async function linkOrCopy(src: string, dest: string): Promise<void> {
  await symlink(path.resolve(src), dest).catch(() => copyFile(src, dest));
}

function killGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') {
      try {
        process.kill(pgid, signal);
      } catch {
        /* already gone */
      }
    }
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
