/** The nerfstudio executor's command building: the ns-* CLIs and their flags a pipeline spec asks for (pure: no I/O). */
import path from 'node:path';
import { flagKey, nerfstudioSpecSchema, defaultExportFormat, type NerfstudioSpec as SpecShape } from '../../domain/workflows/nerfstudio.js';
import { nsDataparserToAppend, nsMethod } from '../../domain/workflows/nerfstudio-methods.js';
import { ExecutorError } from './types.js';

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
