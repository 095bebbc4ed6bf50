/**
 * nerfstudio pipeline spec: the workflow_json of a tool_type nerfstudio workflow. The agent's
 * nerfstudio executor turns it into ns-process-data, ns-train and ns-export invocations.
 * See docs/api.md ("nerfstudio pipeline spec") for the user-facing description.
 */
import { z } from 'zod';
import { fromZodIssues, invalidParameter } from '../../shared/errors.js';
import { RESERVED_KEYS, isPlainObject } from './values.js';
import { isSplatMethod, nsMethod } from './nerfstudio-methods.js';

/** Extra CLI flags passed through verbatim (`--pipeline.model.cull-alpha-thresh 0.005`). */
const EXTRA_ARG_KEY_RE = /^[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$/;
const extraArgs = z
  .record(z.string().max(200).regex(EXTRA_ARG_KEY_RE, 'flag names are letters, digits, _ and - in dotted groups'), z.union([z.string().max(1000), z.number(), z.boolean()]))
  .refine((r) => Object.keys(r).length <= 64, 'at most 64 extra arguments');

export const NERFSTUDIO_SOURCES = ['file_param', 'url', 'path'] as const;
export const NERFSTUDIO_EXPORT_FORMATS = ['gaussian-splat', 'pointcloud', 'mesh'] as const;

export const nerfstudioDataSchema = z.strictObject({
  source: z.enum(NERFSTUDIO_SOURCES),
  /** source file_param: filled at run time by the required file parameter targeting data.file_key. */
  file_key: z.string().min(1).max(512).optional(),
  /** source url: an http(s) URL of an archive (zip of images or a processed dataset) or a video. */
  url: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).max(2048).optional(),
  /** source path: a path on the agent machine. */
  path: z.string().min(1).max(1024).optional(),
});

export const nerfstudioProcessDataSchema = z.strictObject({
  input_type: z.enum(['images', 'video', 'polycam', 'record3d', 'metashape', 'realitycapture', 'odm']),
  camera_type: z.enum(['perspective', 'fisheye', 'equirectangular']).optional(),
  matching_method: z.enum(['exhaustive', 'sequential', 'vocab_tree']).optional(),
  sfm_tool: z.enum(['any', 'colmap', 'hloc']).optional(),
  num_frames_target: z.int().min(1).max(100_000).optional(),
  num_downscales: z.int().min(0).max(8).optional(),
  skip_colmap: z.boolean().optional(),
  extra_args: extraArgs.optional(),
});

export const nerfstudioTrainSchema = z.strictObject({
  max_num_iterations: z.int().min(1).max(10_000_000).optional(),
  steps_per_save: z.int().min(1).optional(),
  mixed_precision: z.boolean().optional(),
  seed: z.int().min(0).optional(),
  extra_args: extraArgs.optional(),
});

export const nerfstudioExportSchema = z.strictObject({
  /** absent: the method decides (gaussian-splat for the splatfacto family, pointcloud otherwise). */
  format: z.enum(NERFSTUDIO_EXPORT_FORMATS).optional(),
  /** pointcloud only */
  num_points: z.int().min(1).max(100_000_000).optional(),
  /** pointcloud only */
  remove_outliers: z.boolean().optional(),
  /** pointcloud and mesh */
  normal_method: z.enum(['open3d', 'model_output']).optional(),
  /** mesh only */
  mesh_method: z.enum(['poisson', 'tsdf', 'marching-cubes']).optional(),
  /** mesh only */
  target_num_faces: z.int().min(1).max(100_000_000).optional(),
  extra_args: extraArgs.optional(),
});

const nerfstudioSpecBase = z.strictObject({
  method: z.string().min(1).max(64).regex(/^[a-z0-9][a-z0-9-]*$/, 'must be a nerfstudio method name such as nerfacto or splatfacto'),
  data: nerfstudioDataSchema,
  process_data: nerfstudioProcessDataSchema.optional(),
  train: nerfstudioTrainSchema.optional(),
  export: nerfstudioExportSchema.optional(),
});

export const nerfstudioSpecSchema = nerfstudioSpecBase
  .superRefine((spec, ctx) => {
    const d = spec.data;
    const need = (field: 'url' | 'path'): void => {
      if (d[field] === undefined) ctx.addIssue({ code: 'custom', path: ['data', field], message: `required when data.source is ${d.source}` });
    };
    const forbid = (field: 'url' | 'path' | 'file_key'): void => {
      if (d[field] !== undefined) ctx.addIssue({ code: 'custom', path: ['data', field], message: `not allowed when data.source is ${d.source}` });
    };
    if (d.source === 'url') {
      need('url');
      forbid('path');
      forbid('file_key');
    } else if (d.source === 'path') {
      need('path');
      forbid('url');
      forbid('file_key');
    } else {
      forbid('url');
      forbid('path');
    }
    const ex = spec.export;
    if (ex) {
      const format = ex.format ?? defaultExportFormat(spec.method);
      const only = (field: keyof typeof ex, formats: readonly string[]): void => {
        if (ex[field] !== undefined && !formats.includes(format)) {
          ctx.addIssue({ code: 'custom', path: ['export', field], message: `only applies to export.format ${formats.join(' or ')}` });
        }
      };
      only('num_points', ['pointcloud']);
      only('remove_outliers', ['pointcloud']);
      only('normal_method', ['pointcloud', 'mesh']);
      only('mesh_method', ['mesh']);
      only('target_num_faces', ['mesh']);
    }
    checkRunnable(spec, ctx);
  });

/** What ns-export runs for an export section: `mesh` is poisson unless mesh_method says otherwise. */
export function defaultExportFormat(method: string): 'gaussian-splat' | 'pointcloud' {
  return isSplatMethod(method) ? 'gaussian-splat' : 'pointcloud';
}

/**
 * Flags the executor sets itself (paths, run naming, writer, resume); an extra_args entry naming one
 * is refused. Compared with `_` read as `-` (tyro accepts both spellings).
 */
export const NERFSTUDIO_RESERVED_FLAGS: Readonly<Record<'process_data' | 'train' | 'export', readonly string[]>> = {
  process_data: ['data', 'output-dir', 'eval-data', 'xml', 'csv'],
  train: ['data', 'output-dir', 'experiment-name', 'timestamp', 'method-name', 'vis', 'load-dir', 'load-step', 'load-checkpoint', 'load-config', 'relative-model-dir', 'save-only-latest-checkpoint', 'pipeline.datamanager.data'],
  export: ['load-config', 'output-dir'],
};
export const flagKey = (k: string): string => k.replace(/^-+/, '').replace(/_/g, '-');

const COLMAP_TYPES = ['images', 'video'];

/**
 * Refuses, at create and at run (after parameters), what a real nerfstudio install cannot run to
 * the end, naming the field: methods that cannot train on a nerfstudio dataset, COLMAP flags on
 * input types that run no COLMAP (process_data.py: only ImagesToNerfstudioDataset and
 * VideoToNerfstudioDataset have them), export formats the model cannot produce (exporter.py), and
 * extra_args that would override what the executor sets.
 */
function checkRunnable(spec: z.output<typeof nerfstudioSpecBase>, ctx: z.RefinementCtx): void {
  const issue = (path: (string | number)[], message: string): void => ctx.addIssue({ code: 'custom', path, message });
  const m = nsMethod(spec.method);
  if (m?.unsupported) issue(['method'], `${spec.method} cannot train on a capture: ${m.unsupported}`);
  const pd = spec.process_data;
  if (pd) {
    for (const f of ['camera_type', 'matching_method', 'sfm_tool', 'skip_colmap'] as const) {
      if (pd[f] !== undefined && !COLMAP_TYPES.includes(pd.input_type)) issue(['process_data', f], `only applies to process_data.input_type images or video (ns-process-data ${pd.input_type} runs no COLMAP)`);
    }
    if (pd.num_frames_target !== undefined && pd.input_type !== 'video') issue(['process_data', 'num_frames_target'], 'only applies to process_data.input_type video');
  }
  const ex = spec.export;
  if (ex) {
    const splat = isSplatMethod(spec.method);
    const format = ex.format ?? defaultExportFormat(spec.method);
    if (format === 'gaussian-splat' && !splat && m) issue(['export', 'format'], `gaussian-splat needs a splatfacto-family method (${spec.method} is not one); use pointcloud or mesh`);
    if (format !== 'gaussian-splat' && splat) {
      issue(['export', 'format'], `${format} cannot export a ${spec.method} run (ns-export ${format === 'mesh' ? 'poisson/tsdf' : format} needs a NeRF datamanager, splatfacto uses FullImageDatamanager); use gaussian-splat`);
    }
    if (format === 'mesh' && ex.mesh_method === 'marching-cubes' && m && m.family !== 'sdf') issue(['export', 'mesh_method'], `marching-cubes needs an SDF method (neus, neus-facto), not ${spec.method}; use poisson or tsdf`);
    if (format === 'mesh' && ex.mesh_method === 'tsdf' && ex.normal_method !== undefined) issue(['export', 'normal_method'], 'ns-export tsdf has no normal method; only poisson and pointcloud take one');
    if (ex.normal_method === 'model_output' && m) {
      const predicts = m.methodName === 'nerfacto' && spec.train?.extra_args?.['pipeline.model.predict-normals'] === true;
      if (!predicts) issue(['export', 'normal_method'], `model_output needs a model that predicts normals (${spec.method} predicts none${m.methodName === 'nerfacto' ? ' unless train.extra_args sets "pipeline.model.predict-normals": true' : ''}); use open3d`);
    }
  }
  for (const section of ['process_data', 'train', 'export'] as const) {
    const extra = spec[section]?.extra_args;
    if (!extra) continue;
    for (const k of Object.keys(extra)) {
      if (NERFSTUDIO_RESERVED_FLAGS[section].includes(flagKey(k))) issue([section, 'extra_args', k], 'is set by the executor and cannot be overridden');
    }
  }
}

export type NerfstudioSpec = z.output<typeof nerfstudioSpecSchema>;

/** Validates a nerfstudio spec; 400 `workflow_json.<path>: ...` on failure. */
export function validateNerfstudioSpec(json: unknown, prefix = 'workflow_json'): NerfstudioSpec {
  if (!isPlainObject(json)) throw invalidParameter(`${prefix}: must be a nerfstudio pipeline spec object {method, data, process_data?, train?, export?}`);
  const r = nerfstudioSpecSchema.safeParse(json);
  if (!r.success) throw fromZodIssues(r.error.issues, prefix);
  return r.data;
}

/** The file parameter target for source file_param. */
export const NERFSTUDIO_FILE_TARGET = 'data.file_key';

const SEGMENT_RE = /^[A-Za-z_][A-Za-z0-9_-]*$/;
const SECTIONS: Record<string, readonly string[]> = {
  data: Object.keys(nerfstudioDataSchema.shape),
  process_data: Object.keys(nerfstudioProcessDataSchema.shape),
  train: Object.keys(nerfstudioTrainSchema.shape),
  export: Object.keys(nerfstudioExportSchema.shape),
};
const TOP = ['method', ...Object.keys(SECTIONS)];

/**
 * Turns a dotted target_path into the key path written into the spec, or returns a problem.
 * Allowed targets are the spec's own fields (`method`, `train.max_num_iterations`,
 * `export.format`, `data.file_key`, a whole section such as `train` for json parameters) and any
 * flag under a section's extra_args, whose remaining dots belong to the flag name
 * (`train.extra_args.pipeline.model.cull-alpha-thresh` -> ['train', 'extra_args', 'pipeline.model.cull-alpha-thresh']).
 */
export function nerfstudioTargetKeys(targetPath: string): { keys: string[] } | { problem: string } {
  const segs = targetPath.split('.');
  if (segs.some((s) => s.length === 0)) return { problem: 'must be a dotted path such as train.max_num_iterations (no empty segments)' };
  const [top, field, ...rest] = segs as [string, string | undefined, ...string[]];
  if (!SEGMENT_RE.test(top) || RESERVED_KEYS.has(top) || !TOP.includes(top)) {
    return { problem: `unknown target ${JSON.stringify(top)}; the spec has ${TOP.join(', ')}` };
  }
  if (field === undefined) return { keys: [top] };
  const fields = SECTIONS[top];
  if (fields === undefined) return { problem: `${top} is not an object` };
  if (!fields.includes(field)) return { problem: `unknown target ${JSON.stringify(`${top}.${field}`)}; ${top} has ${fields.join(', ')}` };
  if (field === 'extra_args') {
    if (rest.length === 0) return { keys: [top, field] };
    const flag = rest.join('.');
    if (!EXTRA_ARG_KEY_RE.test(flag) || rest.some((s) => RESERVED_KEYS.has(s))) return { problem: `invalid extra_args flag name ${JSON.stringify(flag)}` };
    return { keys: [top, field, flag] };
  }
  if (rest.length > 0) return { problem: `${top}.${field} is not an object` };
  return { keys: [top, field] };
}

/** Value at a key path, or undefined (own properties only). */
export function getAtKeys(root: unknown, keys: readonly string[]): unknown {
  let cur: unknown = root;
  for (const k of keys) {
    if (!isPlainObject(cur) || !Object.hasOwn(cur, k)) return undefined;
    cur = cur[k];
  }
  return cur;
}

/**
 * Sets a value at a key path, creating intermediate objects. Returns the key path prefix that
 * blocked the write (an existing non-object) or null on success.
 */
export function setAtKeys(root: Record<string, unknown>, keys: readonly string[], value: unknown): string | null {
  let cur: Record<string, unknown> = root;
  for (let i = 0; i < keys.length - 1; i++) {
    const k = keys[i]!;
    if (RESERVED_KEYS.has(k)) return keys.slice(0, i + 1).join('.');
    const next = Object.hasOwn(cur, k) ? cur[k] : undefined;
    if (next === undefined) {
      const created: Record<string, unknown> = {};
      cur[k] = created;
      cur = created;
    } else if (isPlainObject(next)) {
      cur = next;
    } else {
      return keys.slice(0, i + 1).join('.');
    }
  }
  const last = keys[keys.length - 1];
  if (last === undefined || RESERVED_KEYS.has(last)) return keys.join('.');
  cur[last] = value;
  return null;
}
