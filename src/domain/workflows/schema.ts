/**
 * Workflow definitions: request schemas (create, update, ParameterDef) and the cross-field checks
 * that need the whole definition (graph structure, parameter targets, type inference, defaults,
 * source_key). Pure; no HTTP, no database. Every failure is an AppError 400 `invalid_parameter`
 * whose message starts with the field path.
 *
 * Decisions beyond the spec (documented in docs/api.md):
 * - max_retries is capped at 100 and task_timeout at 2^31-1 seconds (int4 column); parameters at
 *   256 per workflow; required_labels at 64 entries of <= 100 chars.
 * - A parameter's `type` is inferred from the current graph/spec value when omitted and stored, so
 *   the definition returned here (and by export) always carries it.
 * - `required` is satisfied by a caller value, a source_key value or a default.
 * - options only for type string; min/max only for integer/number; accept only for type file;
 *   file parameters cannot have a default (file keys expire after a day).
 * - Two parameters may not target the same input (comfyui) or overlapping paths (nerfstudio).
 */
import { z } from 'zod';
import { fromZodIssues, invalidParameter } from '../../shared/errors.js';
import { modelPathProblem } from '../../protocol/model-path.js';
import { validateComfyGraph, isComfyLink, type ComfyGraph } from './comfy.js';
import { NERFSTUDIO_FILE_TARGET, getAtKeys, nerfstudioSpecSchema, nerfstudioTargetKeys, setAtKeys, validateNerfstudioSpec } from './nerfstudio.js';
import {
  PARAMETER_TYPES,
  RESERVED_KEYS,
  checkValue,
  describeValue,
  inferType,
  isValidAcceptEntry,
  typesCompatible,
  type ParameterType,
} from './values.js';

export { PARAMETER_TYPES, type ParameterType } from './values.js';

export const TOOL_TYPES = ['comfyui', 'nerfstudio'] as const;
export type ToolType = (typeof TOOL_TYPES)[number];
export const DISPATCH_TARGETS = ['agent', 'comfy_cloud'] as const;
export type DispatchTarget = (typeof DISPATCH_TARGETS)[number];
export const WORKFLOW_STATUSES = ['active', 'archived'] as const;
export type WorkflowStatus = (typeof WORKFLOW_STATUSES)[number];

export const MAX_RETRIES_CAP = 100;
export const MAX_TASK_TIMEOUT_S = 2_147_483_647;
export const MAX_PARAMETERS = 256;
export const MAX_REQUIRED_MODELS = 512;
export { MAX_MODEL_PATH_LENGTH } from '../../protocol/model-path.js';
export const MAX_REQUIRED_LABELS = 64;

export const WORKFLOW_SLUG_RE = /^[a-z0-9]+(-[a-z0-9]+)*$/;
export const PARAMETER_KEY_RE = /^[A-Za-z_][A-Za-z0-9_.-]*$/;

export const workflowSlugSchema = z
  .string()
  .min(2, 'must be at least 2 characters')
  .max(100, 'must be at most 100 characters')
  .regex(WORKFLOW_SLUG_RE, 'must be lowercase letters and digits with single hyphens between groups (e.g. sdxl-txt2img)');

/**
 * A model file path relative to the runtime models root (also used by the models API): the one
 * rule agents apply too (src/protocol/model-path.ts).
 */
export const modelPathSchema = z.string().superRefine((s, ctx) => {
  const problem = modelPathProblem(s);
  if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
});

export const parameterDefSchema = z.strictObject({
  key: z
    .string()
    .min(1, 'must not be empty')
    .max(100, 'must be at most 100 characters')
    .regex(PARAMETER_KEY_RE, 'must start with a letter or _ and contain only letters, digits, _ . -')
    .refine((k) => !RESERVED_KEYS.has(k), 'is a reserved name'),
  type: z.enum(PARAMETER_TYPES).optional(),
  label: z.string().max(255).optional(),
  node_id: z.string().min(1).max(100).optional(),
  field: z.string().min(1).max(255).optional(),
  target_path: z.string().min(1).max(500).optional(),
  description: z.string().max(2000).optional(),
  required: z.boolean().optional(),
  default: z.unknown().optional(),
  min: z.number().optional(),
  max: z.number().optional(),
  options: z.array(z.string().max(1000)).min(1).max(1000).optional(),
  accept: z.array(z.string().min(1).max(255)).min(1).max(64).optional(),
  source_key: z.string().min(1).max(100).optional(),
});
export type ParameterDef = z.output<typeof parameterDefSchema>;
/** A ParameterDef after validateWorkflowDefinition: type is always set. */
export type NormalizedParameterDef = ParameterDef & { type: ParameterType };

const fields = {
  workflow_slug: workflowSlugSchema,
  display_name: z.string().min(1, 'must not be empty').max(255, 'must be at most 255 characters'),
  workflow_json: z.record(z.string(), z.unknown(), { error: 'must be an object' }),
  description: z.string().max(2000, 'must be at most 2000 characters'),
  parameters: z.array(parameterDefSchema).max(MAX_PARAMETERS, `at most ${MAX_PARAMETERS} parameters`),
  tool_type: z.enum(TOOL_TYPES),
  required_labels: z
    .array(z.string().min(1, 'labels must not be empty').max(100, 'labels are at most 100 characters'))
    .max(MAX_REQUIRED_LABELS, `at most ${MAX_REQUIRED_LABELS} labels`),
  task_timeout: z.int('must be an integer').min(0, 'must be >= 0').max(MAX_TASK_TIMEOUT_S),
  max_retries: z.int('must be an integer').min(0, 'must be >= 0').max(MAX_RETRIES_CAP, `must be <= ${MAX_RETRIES_CAP}`),
  preferred_gpu: z.string().max(100, 'must be at most 100 characters'),
  default_dispatch_target: z.enum(DISPATCH_TARGETS),
  min_vram_gb: z.number('must be a number').min(0, 'must be >= 0').max(2048, 'must be <= 2048'),
  required_models: z.array(modelPathSchema).max(MAX_REQUIRED_MODELS, `at most ${MAX_REQUIRED_MODELS} entries`),
  /** The priority of runs that give none (1 highest .. 5); unset = 3. */
  default_priority: z.int('must be an integer from 1 to 5').min(1, 'must be an integer from 1 to 5').max(5, 'must be an integer from 1 to 5'),
};

export const workflowCreateSchema = z.strictObject({
  workflow_slug: fields.workflow_slug,
  display_name: fields.display_name,
  workflow_json: fields.workflow_json,
  description: fields.description.optional(),
  parameters: fields.parameters.default([]),
  tool_type: fields.tool_type.default('comfyui'),
  required_labels: fields.required_labels.default([]),
  task_timeout: fields.task_timeout.default(0),
  max_retries: fields.max_retries.default(0),
  preferred_gpu: fields.preferred_gpu.optional(),
  default_dispatch_target: fields.default_dispatch_target.default('agent'),
  min_vram_gb: fields.min_vram_gb.default(0),
  required_models: fields.required_models.default([]),
  default_priority: fields.default_priority.optional(),
});
export type WorkflowCreateInput = z.input<typeof workflowCreateSchema>;
export type WorkflowCreate = z.output<typeof workflowCreateSchema>;
/** A validated, normalized definition (also the export shape): every parameter carries its type. */
export type WorkflowDefinition = Omit<WorkflowCreate, 'parameters'> & { parameters: NormalizedParameterDef[] };

/** Update: every create field optional (no defaults applied), plus snapshot_note and workflow_status. */
export const workflowUpdateSchema = z
  .strictObject({
    workflow_slug: fields.workflow_slug.optional(),
    display_name: fields.display_name.optional(),
    workflow_json: fields.workflow_json.optional(),
    description: fields.description.optional(),
    parameters: fields.parameters.optional(),
    tool_type: fields.tool_type.optional(),
    required_labels: fields.required_labels.optional(),
    task_timeout: fields.task_timeout.optional(),
    max_retries: fields.max_retries.optional(),
    preferred_gpu: fields.preferred_gpu.optional(),
    default_dispatch_target: fields.default_dispatch_target.optional(),
    min_vram_gb: fields.min_vram_gb.optional(),
    required_models: fields.required_models.optional(),
    default_priority: fields.default_priority.optional(),
    snapshot_note: z.string().max(2000, 'must be at most 2000 characters').optional(),
    workflow_status: z.enum(WORKFLOW_STATUSES).optional(),
  })
  .refine((u) => Object.values(u).some((v) => v !== undefined), 'at least one field is required');
export type WorkflowUpdate = z.output<typeof workflowUpdateSchema>;

const q = (s: string): string => JSON.stringify(s);

/** nerfstudio sections that cannot be created by a parameter alone (they have a required field). */
const SECTION_REQUIRED_FIELD: Readonly<Record<string, string>> = { process_data: 'input_type', export: 'format' };

/** Parses a create (or import) body and runs the cross-field checks. */
export function parseWorkflowCreate(body: unknown): WorkflowDefinition {
  const r = workflowCreateSchema.safeParse(body);
  if (!r.success) throw fromZodIssues(r.error.issues);
  return validateWorkflowDefinition(r.data);
}

/** Parses an update body (shape only; merge with mergeWorkflowUpdate to re-validate). */
export function parseWorkflowUpdate(body: unknown): WorkflowUpdate {
  const r = workflowUpdateSchema.safeParse(body);
  if (!r.success) throw fromZodIssues(r.error.issues);
  return r.data;
}

const DEFINITION_KEYS = Object.keys(workflowCreateSchema.shape) as Array<keyof WorkflowCreate>;

/**
 * Applies an update to a stored definition (only the given fields change) and re-validates the
 * result, so a new graph is checked against the existing parameters and vice versa.
 * snapshot_note and workflow_status are not part of the definition; the caller handles them.
 */
export function mergeWorkflowUpdate(current: WorkflowDefinition, patch: WorkflowUpdate): WorkflowDefinition {
  const merged: Record<string, unknown> = {};
  for (const k of DEFINITION_KEYS) {
    const v = (patch as Record<string, unknown>)[k] !== undefined ? (patch as Record<string, unknown>)[k] : current[k];
    if (v !== undefined) merged[k] = v;
  }
  return parseWorkflowCreate(merged);
}

const PARAM_KEY_ORDER = Object.keys(parameterDefSchema.shape) as Array<keyof ParameterDef>;

/** Rebuilds a parameter in schema key order so export -> import is byte-stable. */
function ordered(p: ParameterDef, type: ParameterType): NormalizedParameterDef {
  const out: Record<string, unknown> = {};
  for (const k of PARAM_KEY_ORDER) {
    const v = k === 'type' ? type : p[k];
    if (v !== undefined) out[k] = v;
  }
  return out as NormalizedParameterDef;
}

/**
 * Cross-field checks after the zod parse: workflow_json structure for the tool type, parameter
 * targets, type inference, options/min/max/accept consistency, defaults and source_key. Returns
 * the normalized definition (every ParameterDef carries its type). Throws 400 invalid_parameter.
 */
export function validateWorkflowDefinition(def: WorkflowCreate): WorkflowDefinition {
  const params = def.parameters;
  const where = (i: number): string => `parameters[${i}] (${params[i]?.key ?? '?'})`;

  const index = new Map<string, number>();
  params.forEach((p, i) => {
    const prev = index.get(p.key);
    if (prev !== undefined) throw invalidParameter(`${where(i)}: duplicate key ${q(p.key)} (also parameters[${prev}])`);
    index.set(p.key, i);
  });

  const types: ParameterType[] = [];
  if (def.tool_type === 'comfyui') {
    const graph = validateComfyGraph(def.workflow_json);
    const targeted = new Map<string, number>();
    params.forEach((p, i) => {
      if (p.target_path !== undefined) throw invalidParameter(`${where(i)}: target_path is for nerfstudio workflows; comfyui parameters use node_id and field`);
      if (p.node_id === undefined) throw invalidParameter(`${where(i)}: node_id is required for comfyui workflows`);
      if (p.field === undefined) throw invalidParameter(`${where(i)}: field is required for comfyui workflows`);
      const node = Object.hasOwn(graph, p.node_id) ? graph[p.node_id] : undefined;
      if (!node) throw invalidParameter(`${where(i)}: node ${q(p.node_id)} does not exist in workflow_json`);
      if (!Object.hasOwn(node.inputs, p.field)) {
        throw invalidParameter(`${where(i)}: node ${q(p.node_id)} (${node.class_type}) has no input ${q(p.field)}`);
      }
      const slot = `${p.node_id}\u0000${p.field}`;
      const other = targeted.get(slot);
      if (other !== undefined) throw invalidParameter(`${where(i)}: node ${q(p.node_id)} input ${q(p.field)} is already targeted by ${where(other)}`);
      targeted.set(slot, i);
      types.push(resolveType(p, node.inputs[p.field], where(i), `node ${q(p.node_id)} input ${q(p.field)}`, graph));
      // ComfyUI reads every array input as a link, so an array default must be a link to a node of this graph.
      if (Array.isArray(p.default) && !(isComfyLink(p.default) && Object.hasOwn(graph, p.default[0]))) {
        throw invalidParameter(`${where(i)}: default is an array, which ComfyUI reads as a link; it must be [node_id, output_index] naming a node of the graph`);
      }
    });
  } else {
    const spec = validateNerfstudioSpec(def.workflow_json);
    const targeted: Array<{ keys: string[]; i: number }> = [];
    params.forEach((p, i) => {
      if (p.node_id !== undefined || p.field !== undefined) {
        throw invalidParameter(`${where(i)}: node_id and field are for comfyui workflows; nerfstudio parameters use target_path`);
      }
      if (p.target_path === undefined) throw invalidParameter(`${where(i)}: target_path is required for nerfstudio workflows`);
      const t = nerfstudioTargetKeys(p.target_path);
      if ('problem' in t) throw invalidParameter(`${where(i)}: target_path ${q(p.target_path)}: ${t.problem}`);
      for (const o of targeted) {
        const n = Math.min(o.keys.length, t.keys.length);
        if (o.keys.slice(0, n).every((k, j) => k === t.keys[j])) {
          throw invalidParameter(`${where(i)}: target_path ${q(p.target_path)} overlaps the target of ${where(o.i)}`);
        }
      }
      const [section, field] = t.keys;
      const requiredField = section === undefined ? undefined : SECTION_REQUIRED_FIELD[section];
      if (requiredField !== undefined && field !== undefined && field !== requiredField && getAtKeys(spec, [section!]) === undefined) {
        throw invalidParameter(`${where(i)}: target_path ${q(p.target_path)} needs workflow_json.${section!} (with its ${requiredField}) to exist`);
      }
      targeted.push({ keys: t.keys, i });
      types.push(resolveType(p, getAtKeys(spec, t.keys), where(i), `workflow_json.${t.keys.join('.')}`, undefined));
      // every option (and the default) must give a pipeline that can run: refused now, not at run time
      for (const v of [...(p.options ?? []), ...(p.default !== undefined && p.options === undefined ? [p.default] : [])]) {
        const probe = structuredClone(def.workflow_json) as Record<string, unknown>;
        if (setAtKeys(probe, t.keys, v) !== null) continue;
        const r = nerfstudioSpecSchema.safeParse(probe);
        const issue = r.success ? undefined : r.error.issues[0];
        if (issue) throw invalidParameter(`${where(i)}: ${p.options ? 'option' : 'default'} ${JSON.stringify(v)} makes workflow_json.${issue.path.map(String).join('.') || '(root)'} invalid: ${issue.message}`);
      }
    });
    if (spec.data.source === 'file_param') {
      const i = params.findIndex((p) => p.target_path === NERFSTUDIO_FILE_TARGET);
      const p = params[i];
      if (p === undefined || types[i] !== 'file') {
        throw invalidParameter(`workflow_json.data.source: file_param needs a parameter of type file with target_path ${q(NERFSTUDIO_FILE_TARGET)}`);
      }
      if (p.required !== true) throw invalidParameter(`${where(i)}: must be required (it supplies the input data for data.source file_param)`);
    }
  }

  params.forEach((p, i) => checkConstraints(p, types[i]!, where(i)));
  checkSourceKeys(params, types, index, where);

  return { ...def, parameters: params.map((p, i) => ordered(p, types[i]!)) };
}

function resolveType(p: ParameterDef, current: unknown, at: string, target: string, graph: ComfyGraph | undefined): ParameterType {
  if (p.type !== undefined) return p.type;
  if (graph !== undefined && isComfyLink(current)) {
    throw invalidParameter(`${at}: type is required because ${target} is a link to node ${q(current[0])}`);
  }
  const inferred = inferType(current) ?? (current === undefined && p.default !== undefined ? inferType(p.default) : null);
  if (inferred === null) {
    throw invalidParameter(`${at}: type is required (cannot infer it from ${current === undefined ? `${target}, which has no value` : `${target} = ${describeValue(current)}`})`);
  }
  return inferred;
}

function checkConstraints(p: ParameterDef, type: ParameterType, at: string): void {
  if (p.options !== undefined) {
    if (type !== 'string') throw invalidParameter(`${at}: options are only allowed for type string (type is ${type})`);
    const seen = new Set<string>();
    for (const o of p.options) {
      if (seen.has(o)) throw invalidParameter(`${at}: options contains ${q(o)} twice`);
      seen.add(o);
    }
  }
  if (p.min !== undefined || p.max !== undefined) {
    if (type !== 'integer' && type !== 'number') throw invalidParameter(`${at}: min and max are only allowed for types integer and number (type is ${type})`);
    if (p.min !== undefined && p.max !== undefined && p.min > p.max) throw invalidParameter(`${at}: min (${p.min}) must be <= max (${p.max})`);
  }
  if (p.accept !== undefined) {
    if (type !== 'file') throw invalidParameter(`${at}: accept is only allowed for type file (type is ${type})`);
    for (const a of p.accept) {
      if (!isValidAcceptEntry(a)) throw invalidParameter(`${at}: accept entry ${q(a)} must be a MIME type (image/png), a wildcard (image/*) or an extension (.png)`);
    }
  }
  if (p.default !== undefined) {
    if (type === 'file') throw invalidParameter(`${at}: file parameters cannot have a default (file keys expire)`);
    const problem = checkValue({ type, min: p.min, max: p.max, options: p.options }, p.default);
    if (problem !== null) throw invalidParameter(`${at}: default ${problem}`);
  }
}

function checkSourceKeys(
  params: readonly ParameterDef[],
  types: readonly ParameterType[],
  index: ReadonlyMap<string, number>,
  where: (i: number) => string,
): void {
  params.forEach((p, i) => {
    if (p.source_key === undefined) return;
    const j = index.get(p.source_key);
    if (j === undefined) throw invalidParameter(`${where(i)}: source_key ${q(p.source_key)} is not a parameter of this workflow`);
    if (j === i) throw invalidParameter(`${where(i)}: source_key must name another parameter`);
    if (!typesCompatible(types[j]!, types[i]!)) {
      throw invalidParameter(`${where(i)}: source_key ${q(p.source_key)} is of type ${types[j]!}, which cannot fill a parameter of type ${types[i]!}`);
    }
  });
  // Cycles: follow each chain; a chain longer than the parameter count loops.
  params.forEach((p, i) => {
    const chain = [p.key];
    let cur = p.source_key;
    while (cur !== undefined) {
      if (chain.includes(cur)) throw invalidParameter(`${where(i)}: source_key cycle (${[...chain, cur].join(' -> ')})`);
      chain.push(cur);
      const j = index.get(cur);
      cur = j === undefined ? undefined : params[j]?.source_key;
    }
  });
}
