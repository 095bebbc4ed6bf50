/**
 * nerfstudio: runs the ns-* CLIs as child processes.
 *
 *   download      input files are already local (the agent fetched them); reported here
 *   process_data  ns-process-data <images|video> --data <input> --output-dir <work>/processed
 *   train         ns-train <method> --data <processed> --output-dir <work>/outputs
 *                   --max-num-iterations N --viewer.quit-on-train-completion True
 *   export        ns-export <gaussian-splat|pointcloud|poisson> --load-config <config.yml>
 *                   --output-dir <work>/export
 *   upload        reported by the agent
 *
 * Every CLI is spawned detached (its own process group) so cancel can signal the whole group
 * (DataLoader workers, viewer): SIGTERM, then SIGKILL after a grace period.
 *
 * Spec (the workflow's "3D pipeline spec"; every field optional, parameters already injected):
 *   {
 *     method: "splatfacto",                     // or train.method
 *     input_type: "images" | "video",           // or process_data.input_type; inferred otherwise
 *     max_num_iterations: 30000,                // or train.max_num_iterations
 *     export_format: "gaussian-splat",          // or export.format; default by method
 *     process_data: { skip?: boolean, args?: string[] | {flag: value} },
 *     train:        { args?: string[] | {flag: value} },   // e.g. ["nerfstudio-data", "--downscale-factor", "2"]
 *     export:       { args?: string[] | {flag: value} }
 *   }
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, readdir, stat, symlink, copyFile } from 'node:fs/promises';
import path from 'node:path';
import { ExecutorError, type ExecContext, type ExecOutput, type ExecResult, type Executor, type ProgressStage } from './types.js';
import { TailBuffer, cancelledError, clamp01, describeOutput, isRecord, toBool, toNumber } from './util.js';

export interface NerfstudioOptions {
  /** Directory holding ns-process-data, ns-train, ns-export. Default: resolve through PATH. */
  binDir?: string;
  /** Grace between SIGTERM and SIGKILL on cancel. Default 10 s. */
  killGraceMs?: number;
  /** Extra environment for the CLIs. */
  env?: Record<string, string>;
  /** Default training iterations when the spec has none. Default 30000 (nerfstudio's default). */
  defaultIterations?: number;
}

export type ExportFormat = 'gaussian-splat' | 'pointcloud' | 'poisson';
const EXPORT_FILES: Record<ExportFormat, string> = {
  'gaussian-splat': 'splat.ply',
  pointcloud: 'point_cloud.ply',
  poisson: 'poisson_mesh.ply',
};
const VIDEO_EXT = new Set(['.mp4', '.mov', '.avi', '.mkv', '.webm', '.m4v', '.mpg', '.mpeg']);

/** Stage weights of the overall 0..1 progress (upload, done by the agent, gets the rest). */
const SPAN: Record<Exclude<ProgressStage, 'upload'>, [number, number]> = {
  download: [0, 0.02],
  process_data: [0.02, 0.15],
  train: [0.15, 0.9],
  export: [0.9, 0.97],
};

export interface NerfstudioSpec {
  method: string;
  inputType: 'images' | 'video' | undefined;
  maxIterations: number;
  exportFormat: ExportFormat;
  skipProcessData: boolean;
  processDataArgs: string[];
  trainArgs: string[];
  exportArgs: string[];
}

function toArgs(v: unknown, where: string): string[] {
  if (v === undefined || v === null) return [];
  if (Array.isArray(v)) {
    return v.map((a) => {
      if (typeof a === 'string') return a;
      if (typeof a === 'number' || typeof a === 'boolean') return String(a);
      throw new ExecutorError('bad_input', `${where} must be a list of strings`);
    });
  }
  if (isRecord(v)) {
    const out: string[] = [];
    for (const [k, val] of Object.entries(v)) {
      const flag = k.startsWith('-') ? k : `--${k}`;
      if (val === null || val === undefined) continue;
      if (typeof val === 'boolean') out.push(flag, val ? 'True' : 'False');
      else if (typeof val === 'string' || typeof val === 'number') out.push(flag, String(val));
      else if (Array.isArray(val)) out.push(flag, ...val.map(String));
      else throw new ExecutorError('bad_input', `${where}.${k} must be a string, number, boolean or list`);
    }
    return out;
  }
  throw new ExecutorError('bad_input', `${where} must be a list of strings or an object of flags`);
}

/** Normalises the workflow spec (flat or nested fields), falling back to parameters. */
export function parseNerfstudioSpec(workflow: unknown, parameters: Record<string, unknown>, defaultIterations = 30000): NerfstudioSpec {
  const spec = isRecord(workflow) ? workflow : {};
  const sub = (k: string): Record<string, unknown> => (isRecord(spec[k]) ? spec[k] : {});
  const pd = sub('process_data');
  const tr = sub('train');
  const ex = sub('export');
  const pick = (...vals: unknown[]): unknown => vals.find((v) => v !== undefined && v !== null && v !== '');

  const method = pick(tr.method, spec.method, parameters.method) ?? 'splatfacto';
  if (typeof method !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(method)) {
    throw new ExecutorError('bad_input', `invalid nerfstudio method: ${JSON.stringify(method)}`);
  }
  const inputTypeRaw = pick(pd.input_type, spec.input_type, parameters.input_type);
  if (inputTypeRaw !== undefined && inputTypeRaw !== 'images' && inputTypeRaw !== 'video') {
    throw new ExecutorError('bad_input', `input_type must be "images" or "video", got ${JSON.stringify(inputTypeRaw)}`);
  }
  const iters = toNumber(pick(tr.max_num_iterations, spec.max_num_iterations, parameters.max_num_iterations)) ?? defaultIterations;
  if (!Number.isInteger(iters) || iters < 1) throw new ExecutorError('bad_input', `max_num_iterations must be a positive integer, got ${iters}`);
  const fmtRaw = pick(ex.format, spec.export_format, parameters.export_format) ?? (method.startsWith('splatfacto') ? 'gaussian-splat' : 'pointcloud');
  if (typeof fmtRaw !== 'string' || !(fmtRaw in EXPORT_FILES)) {
    throw new ExecutorError('bad_input', `export format must be one of ${Object.keys(EXPORT_FILES).join(', ')}, got ${JSON.stringify(fmtRaw)}`);
  }
  return {
    method,
    inputType: inputTypeRaw,
    maxIterations: iters,
    exportFormat: fmtRaw as ExportFormat,
    skipProcessData: toBool(pick(pd.skip, spec.skip_process_data)) || spec.process_data === false,
    processDataArgs: toArgs(pd.args, 'process_data.args'),
    trainArgs: toArgs(tr.args, 'train.args'),
    exportArgs: toArgs(ex.args, 'export.args'),
  };
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
}

export class NerfstudioExecutor implements Executor {
  readonly name = 'nerfstudio';
  private readonly binDir: string | undefined;
  private readonly killGraceMs: number;
  private readonly env: Record<string, string>;
  private readonly defaultIterations: number;
  private readonly running = new Set<ChildProcess>();

  constructor(opts: NerfstudioOptions = {}) {
    this.binDir = opts.binDir;
    this.killGraceMs = opts.killGraceMs ?? 10_000;
    this.env = opts.env ?? {};
    this.defaultIterations = opts.defaultIterations ?? 30000;
  }

  async close(): Promise<void> {
    for (const child of this.running) if (child.pid !== undefined) killGroup(child.pid, 'SIGKILL');
    this.running.clear();
  }

  private bin(name: string): string {
    return this.binDir ? path.join(this.binDir, name) : name;
  }

  async run(ctx: ExecContext): Promise<ExecResult> {
    const spec = parseNerfstudioSpec(ctx.workflow, ctx.parameters, this.defaultIterations);
    if (ctx.signal.aborted) throw cancelledError();
    const tick = (stage: Exclude<ProgressStage, 'upload'>, within: number, step: number, total: number, node: string, message: string): void => {
      const [a, b] = SPAN[stage];
      ctx.onProgress({ progress: a + (b - a) * clamp01(within), step_current: step, step_total: total, current_node: node, stage, message });
    };

    // download: the agent already fetched the inputs
    if (ctx.inputFiles.length === 0) throw new ExecutorError('bad_input', 'nerfstudio tasks need at least one input file (images, a video or a zip of images)');
    const n = ctx.inputFiles.length;
    tick('download', 1, n, n, 'download', `${n} input file${n === 1 ? '' : 's'} ready`);

    const input = await this.prepareInput(ctx, spec);
    const processed = path.join(ctx.workDir, 'processed');
    const outputsDir = path.join(ctx.workDir, 'outputs');
    const exportDir = path.join(ctx.workDir, 'export');
    let dataDir = processed;

    // process_data
    if (spec.skipProcessData || input.alreadyProcessed) {
      dataDir = input.path;
      tick('process_data', 1, 1, 1, 'ns-process-data', 'input is already a nerfstudio dataset; skipping ns-process-data');
    } else {
      tick('process_data', 0, 0, 1, 'ns-process-data', `ns-process-data ${input.kind}: started`);
      let doneLines = 0;
      await this.runStage(ctx, {
        stage: 'process_data',
        cmd: this.bin('ns-process-data'),
        args: [input.kind, '--data', input.path, '--output-dir', processed, ...spec.processDataArgs],
        onLine: (line) => {
          const clean = line.replace(ANSI, '').replace(/^\[\d\d:\d\d:\d\d\]\s*/, '').replace(/\s{2,}\S+\.py:\d+\s*$/, '').trim();
          if (/\bDone\b|All DONE|CONGRATS|Number of frames|Starting with/.test(clean)) {
            doneLines++;
            tick('process_data', Math.min(0.9, doneLines / 8), 0, 1, 'ns-process-data', clean);
          }
        },
      });
      tick('process_data', 1, 1, 1, 'ns-process-data', 'ns-process-data finished');
    }

    // train
    const total = spec.maxIterations;
    tick('train', 0, 0, total, 'ns-train', `ns-train ${spec.method}: starting (${total} iterations)`);
    const parser = new TrainOutputParser();
    await this.runStage(ctx, {
      stage: 'train',
      cmd: this.bin('ns-train'),
      args: [
        spec.method,
        '--data',
        dataDir,
        '--output-dir',
        outputsDir,
        '--max-num-iterations',
        String(total),
        '--viewer.quit-on-train-completion',
        'True',
        ...spec.trainArgs,
      ],
      onLine: (line) => {
        const row = parser.line(line);
        if (!row || row.step <= parser.lastStep) return;
        parser.lastStep = row.step;
        const eta = row.columns['ETA (time)'];
        tick(
          'train',
          row.step / total,
          row.step,
          total,
          'ns-train',
          `step ${row.step}/${total} (${row.percent.toFixed(2)}%)${eta ? `, ETA ${eta}` : ''}`,
        );
      },
    });
    tick('train', 1, total, total, 'ns-train', `training finished (${total} iterations)`);

    const config = await findConfig(outputsDir);
    if (!config) throw new ExecutorError('tool_error', `ns-train finished but wrote no config.yml under ${outputsDir}`);
    ctx.log('nerfstudio: trainer config', { config });

    // export
    tick('export', 0, 0, 1, 'ns-export', `ns-export ${spec.exportFormat}: started`);
    await this.runStage(ctx, {
      stage: 'export',
      cmd: this.bin('ns-export'),
      args: [spec.exportFormat, '--load-config', config, '--output-dir', exportDir, ...spec.exportArgs],
    });
    const outputs = await collectExports(exportDir, EXPORT_FILES[spec.exportFormat]);
    if (outputs.length === 0) throw new ExecutorError('tool_error', `ns-export ${spec.exportFormat} wrote nothing to ${exportDir}`);
    tick('export', 1, 1, 1, 'ns-export', `exported ${outputs[0]!.name} (${outputs[0]!.size} bytes)`);
    return { outputs };
  }

  /** Lays the inputs out the way ns-process-data wants them. */
  private async prepareInput(
    ctx: ExecContext,
    spec: NerfstudioSpec,
  ): Promise<{ kind: 'images' | 'video'; path: string; alreadyProcessed: boolean }> {
    const files = ctx.inputFiles;
    const first = files[0]!;
    const isDir = async (p: string): Promise<boolean> => (await stat(p).catch(() => undefined))?.isDirectory() ?? false;
    const hasTransforms = async (p: string): Promise<boolean> => (await stat(path.join(p, 'transforms.json')).catch(() => undefined))?.isFile() ?? false;

    if (files.length === 1 && (await isDir(first.localPath))) {
      return { kind: spec.inputType ?? 'images', path: first.localPath, alreadyProcessed: await hasTransforms(first.localPath) };
    }
    const ext = (f: { fileName: string; localPath: string }): string => path.extname(f.fileName || f.localPath).toLowerCase();
    if (files.length === 1 && ext(first) === '.zip') {
      const dest = path.join(ctx.workDir, 'input');
      await mkdir(dest, { recursive: true });
      await this.unzip(ctx, first.localPath, dest);
      // descend through a single top-level folder
      let root = dest;
      for (;;) {
        const entries = (await readdir(root, { withFileTypes: true })).filter((e) => !e.name.startsWith('.') && e.name !== '__MACOSX');
        const only = entries[0];
        if (entries.length === 1 && only && only.isDirectory()) root = path.join(root, only.name);
        else break;
      }
      return { kind: spec.inputType ?? 'images', path: root, alreadyProcessed: await hasTransforms(root) };
    }
    const kind = spec.inputType ?? (files.length === 1 && VIDEO_EXT.has(ext(first)) ? 'video' : 'images');
    if (kind === 'video') {
      if (files.length !== 1) throw new ExecutorError('bad_input', `video input takes exactly one file, got ${files.length}`);
      return { kind, path: first.localPath, alreadyProcessed: false };
    }
    const dir = path.join(ctx.workDir, 'input', 'images');
    await mkdir(dir, { recursive: true });
    const used = new Set<string>();
    for (const [i, f] of files.entries()) {
      let name = path.basename(f.fileName || f.localPath);
      if (used.has(name)) name = `${i}_${name}`;
      used.add(name);
      const target = path.join(dir, name);
      await symlink(path.resolve(f.localPath), target).catch(() => copyFile(f.localPath, target));
    }
    return { kind, path: dir, alreadyProcessed: false };
  }

  private async unzip(ctx: ExecContext, zip: string, dest: string): Promise<void> {
    const attempts: StageRun[] = [
      { stage: 'download', cmd: 'unzip', args: ['-q', '-o', zip, '-d', dest] },
      { stage: 'download', cmd: 'python3', args: ['-m', 'zipfile', '-e', zip, dest] },
    ];
    let last: unknown;
    for (const a of attempts) {
      try {
        await this.runStage(ctx, a);
        return;
      } catch (err) {
        if (err instanceof ExecutorError && err.code === 'cancelled') throw err;
        last = err;
      }
    }
    throw new ExecutorError('bad_input', `could not extract ${path.basename(zip)}: ${(last as Error).message}`);
  }

  /** Spawns one CLI in its own process group; resolves on exit 0. */
  private runStage(ctx: ExecContext, s: StageRun): Promise<void> {
    const name = path.basename(s.cmd);
    ctx.log(`nerfstudio: ${name} ${s.args.join(' ')}`, { stage: s.stage });
    return new Promise<void>((resolve, reject) => {
      if (ctx.signal.aborted) {
        reject(cancelledError());
        return;
      }
      let child: ChildProcess;
      try {
        child = spawn(s.cmd, s.args, {
          cwd: ctx.workDir,
          detached: true,
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { ...process.env, ...this.env, PYTHONUNBUFFERED: '1', TERM: process.env.TERM ?? 'dumb' },
        });
      } catch (err) {
        reject(new ExecutorError('tool_error', `cannot start ${name}: ${(err as Error).message}`, { cause: err }));
        return;
      }
      this.running.add(child);
      const stderrTail = new TailBuffer(16_384);
      const stdoutTail = new TailBuffer(4_096);
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
      const onStdout = (chunk: Buffer): void => {
        const text = chunk.toString('utf8');
        stdoutTail.push(text);
        const parts = (partial + text).split(/\r\n|\r|\n/);
        partial = parts.pop() ?? '';
        if (partial.length > 65_536) partial = partial.slice(-65_536);
        if (s.onLine) for (const l of parts) if (l) s.onLine(l);
      };
      child.stdout?.on('data', onStdout);
      child.stderr?.on('data', (c: Buffer) => stderrTail.push(c.toString('utf8')));

      const finish = (): void => {
        if (settled) return;
        settled = true;
        if (partial && s.onLine) s.onLine(partial);
        if (killTimer) clearTimeout(killTimer);
        if (exitTimer) clearTimeout(exitTimer);
        ctx.signal.removeEventListener('abort', onAbort);
        this.running.delete(child);
        // Whatever is left of the group (orphaned workers) goes too.
        if (child.pid !== undefined) killGroup(child.pid, 'SIGKILL');
        if (cancelled) {
          reject(cancelledError());
          return;
        }
        const code = exit?.code ?? null;
        if (code === 0) {
          resolve();
          return;
        }
        const how = code !== null ? `exited with code ${code}` : `was killed by ${exit?.signal ?? 'a signal'}`;
        const tail = stderrTail.lines(25) || stdoutTail.lines(10);
        reject(
          new ExecutorError('tool_error', `${name} ${how}${tail ? `:\n${tail}` : ''}`, {
            details: { stage: s.stage, exit_code: code, signal: exit?.signal ?? null },
          }),
        );
      };

      child.on('error', (err: NodeJS.ErrnoException) => {
        if (settled) return;
        settled = true;
        ctx.signal.removeEventListener('abort', onAbort);
        this.running.delete(child);
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

/** Newest outputs/<experiment>/<method>/<timestamp>/config.yml. */
async function findConfig(outputsDir: string): Promise<string | undefined> {
  let best: { p: string; t: number } | undefined;
  const walk = async (dir: string, depth: number): Promise<void> => {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDirectory() && depth < 4) await walk(p, depth + 1);
      else if (e.isFile() && e.name === 'config.yml') {
        const t = (await stat(p)).mtimeMs;
        if (!best || t > best.t) best = { p, t };
      }
    }
  };
  await walk(outputsDir, 0);
  return best?.p;
}

async function collectExports(exportDir: string, primary: string): Promise<ExecOutput[]> {
  const entries = await readdir(exportDir, { withFileTypes: true }).catch(() => []);
  const files = entries.filter((e) => e.isFile()).map((e) => e.name);
  const ordered = [...files].sort((a, b) => (a === primary ? -1 : b === primary ? 1 : a.localeCompare(b)));
  const outputs: ExecOutput[] = [];
  for (const f of ordered) outputs.push(await describeOutput(path.join(exportDir, f)));
  return outputs;
}
