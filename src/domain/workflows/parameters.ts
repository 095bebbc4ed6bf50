/**
 * Run-time parameter resolution: a run's `{parameters}` plus the workflow's ParameterDefs become
 * the concrete ComfyUI graph or nerfstudio spec. One pure function; the caller looks the staged
 * files up first (collectFileKeys) and passes them in.
 *
 * Rules, in order, for each parameter (source_key sources first):
 *   1. the caller's value, when given;
 *   2. else the resolved value of its source_key parameter, when that has one;
 *   3. else its default;
 *   4. else 400 when required, or left out (the graph/spec keeps its current value).
 * Every value (including derived ones and defaults) is checked against the parameter's type,
 * min/max, options, and, for files, the staged file (caller's team, not expired, accepted kind).
 * Strings are never coerced to numbers or booleans. Every error is a 400 invalid_parameter whose
 * message starts with `parameters.<key>:`.
 */
import { invalidParameter, type AppError } from '../../shared/errors.js';
import { isComfyLink, type ComfyGraph } from './comfy.js';
import { nerfstudioSpecSchema, nerfstudioTargetKeys, setAtKeys } from './nerfstudio.js';
import type { NormalizedParameterDef, ToolType } from './schema.js';
import { checkValue, describeValue, fileKindMatches, isPlainObject } from './values.js';

/** A staged input file as the files module reports it. */
export interface StagedFile {
  fileKey: string;
  teamId: string;
  contentType: string;
  fileName: string;
  /** epoch ms */
  expiresAt: number;
}

export interface FileInput {
  key: string;
  fileKey: string;
  nodeId?: string;
  field?: string;
  targetPath?: string;
}

export interface ResolveRunArgs {
  toolType: ToolType;
  workflowJson: unknown;
  /** Normalized definitions (validateWorkflowDefinition output): every one carries its type. */
  parameters: readonly NormalizedParameterDef[];
  /** The run request's `parameters`; undefined is treated as {}. */
  input: unknown;
  /** Staged files by file_key (from a lookup of collectFileKeys(...)). */
  files: ReadonlyMap<string, StagedFile>;
  teamId: string;
  /** epoch ms */
  now: number;
}

export interface ResolvedRun {
  /** The resolved value of every parameter that has one, by key. */
  values: Record<string, unknown>;
  /** A deep copy of workflowJson with the values injected. */
  workflow: unknown;
  fileInputs: FileInput[];
}

const q = (s: string): string => JSON.stringify(s.length > 120 ? `${s.slice(0, 120)}…` : s);
const fail = (key: string, message: string): AppError => invalidParameter(`parameters.${key}: ${message}`);

/** The file_key values the input gives to parameters of type file (deduplicated), for the lookup. */
export function collectFileKeys(defs: readonly NormalizedParameterDef[], input: unknown): string[] {
  if (!isPlainObject(input)) return [];
  const out = new Set<string>();
  for (const d of defs) {
    if (d.type !== 'file' || !Object.hasOwn(input, d.key)) continue;
    const v = input[d.key];
    if (typeof v === 'string' && v.length > 0) out.add(v);
  }
  return [...out];
}

export function resolveRunParameters(args: ResolveRunArgs): ResolvedRun {
  const { parameters: defs, files, teamId, now } = args;
  const input: unknown = args.input === undefined ? {} : args.input;
  if (!isPlainObject(input)) throw invalidParameter(`parameters: must be an object of parameter key to value (got ${describeValue(input)})`);

  const byKey = new Map<string, NormalizedParameterDef>();
  for (const d of defs) byKey.set(d.key, d);
  for (const k of Object.keys(input)) {
    if (!byKey.has(k)) {
      const known = defs.map((d) => d.key);
      const hint = known.length === 0 ? 'this workflow takes no parameters' : `known parameters: ${known.slice(0, 30).join(', ')}${known.length > 30 ? ', …' : ''}`;
      throw fail(k, `unknown parameter (${hint})`);
    }
  }

  const checkFile = (d: NormalizedParameterDef, fileKey: string, how: string): void => {
    const f = files.get(fileKey);
    // A foreign team's key is reported exactly like a missing one.
    if (f === undefined || f.teamId !== teamId || f.fileKey !== fileKey) {
      throw fail(d.key, `${how}file ${q(fileKey)} not found; stage it with POST /r/files/presign and upload it first`);
    }
    if (!(f.expiresAt > now)) throw fail(d.key, `${how}file ${q(fileKey)} has expired (staged files are kept for 1 day); upload it again`);
    if (d.accept !== undefined && !fileKindMatches(d.accept, f.contentType, f.fileName)) {
      throw fail(d.key, `${how}file ${q(f.fileName)} (${f.contentType || 'unknown type'}) is not an accepted kind; accepted: ${d.accept.join(', ')}`);
    }
  };

  const check = (d: NormalizedParameterDef, value: unknown, how: string): unknown => {
    const problem = checkValue(d, value);
    if (problem !== null) throw fail(d.key, `${how}${problem}`);
    if (d.type === 'file') checkFile(d, value as string, how);
    return typeof value === 'object' && value !== null ? structuredClone(value) : value;
  };

  const resolved = new Map<string, { value: unknown } | null>();
  const visiting = new Set<string>();
  const resolve = (d: NormalizedParameterDef): { value: unknown } | null => {
    const done = resolved.get(d.key);
    if (done !== undefined) return done;
    if (visiting.has(d.key)) throw fail(d.key, 'source_key cycle');
    visiting.add(d.key);
    let out: { value: unknown } | null = null;
    if (Object.hasOwn(input, d.key) && input[d.key] !== undefined) {
      out = { value: check(d, input[d.key], '') };
    } else {
      const src = d.source_key === undefined ? undefined : byKey.get(d.source_key);
      const fromSource = src === undefined ? null : resolve(src);
      if (fromSource !== null) {
        out = { value: check(d, fromSource.value, `value from source_key ${q(d.source_key ?? '')} `) };
      } else if (d.default !== undefined) {
        out = { value: check(d, d.default, 'default ') };
      } else if (d.required === true) {
        throw fail(d.key, `required parameter is missing (expected ${d.type === 'file' ? 'a file_key' : `a value of type ${d.type}`})`);
      }
    }
    visiting.delete(d.key);
    resolved.set(d.key, out);
    return out;
  };
  for (const d of defs) resolve(d);

  const values: Record<string, unknown> = {};
  const fileInputs: FileInput[] = [];
  const workflow: unknown = structuredClone(args.workflowJson);

  if (args.toolType === 'comfyui') {
    if (!isPlainObject(workflow)) throw invalidParameter('workflow_json: the stored graph is not an object');
    const graph = workflow as ComfyGraph;
    for (const d of defs) {
      const r = resolved.get(d.key);
      if (!r) continue;
      values[d.key] = r.value;
      if (d.node_id === undefined || d.field === undefined) throw fail(d.key, 'parameter has no node_id/field target');
      const node = Object.hasOwn(graph, d.node_id) ? graph[d.node_id] : undefined;
      if (!node || !isPlainObject(node.inputs) || !Object.hasOwn(node.inputs, d.field)) {
        throw fail(d.key, `target node ${q(d.node_id)} input ${q(d.field)} does not exist in the workflow`);
      }
      // ComfyUI reads every array input as a link [node_id, output_index] (only json parameters can hold one).
      if (Array.isArray(r.value)) {
        if (!isComfyLink(r.value)) throw fail(d.key, 'arrays are read as links by ComfyUI; an array value must be [node_id, output_index]');
        if (!Object.hasOwn(graph, r.value[0])) throw fail(d.key, `value links to missing node ${q(r.value[0])}`);
      }
      node.inputs[d.field] = r.value;
      if (d.type === 'file') fileInputs.push({ key: d.key, fileKey: r.value as string, nodeId: d.node_id, field: d.field });
    }
  } else {
    if (!isPlainObject(workflow)) throw invalidParameter('workflow_json: the stored spec is not an object');
    const targets: Array<{ key: string; path: string }> = [];
    for (const d of defs) {
      const r = resolved.get(d.key);
      if (!r) continue;
      values[d.key] = r.value;
      if (d.target_path === undefined) throw fail(d.key, 'parameter has no target_path');
      const t = nerfstudioTargetKeys(d.target_path);
      if ('problem' in t) throw fail(d.key, `target_path ${q(d.target_path)}: ${t.problem}`);
      const blocked = setAtKeys(workflow, t.keys, r.value);
      if (blocked !== null) throw fail(d.key, `cannot set target_path ${q(d.target_path)}: workflow_json.${blocked} is not an object`);
      targets.push({ key: d.key, path: t.keys.join('.') });
      if (d.type === 'file') fileInputs.push({ key: d.key, fileKey: r.value as string, targetPath: d.target_path });
    }
    // The injected spec must still be a valid spec (e.g. train.max_num_iterations stays an integer).
    const check2 = nerfstudioSpecSchema.safeParse(workflow);
    if (!check2.success) {
      const issue = check2.error.issues[0];
      const path = (issue?.path ?? []).map(String);
      const joined = path.join('.');
      const culprit = joined === '' ? undefined : targets.find((t) => joined === t.path || joined.startsWith(`${t.path}.`) || t.path.startsWith(`${joined}.`));
      const msg = issue?.code === 'unrecognized_keys' && 'keys' in issue ? `unknown field(s): ${(issue.keys as string[]).join(', ')}` : (issue?.message ?? 'invalid');
      if (culprit) throw fail(culprit.key, `makes workflow_json.${joined || '(root)'} invalid: ${msg}`);
      throw invalidParameter(`workflow_json${joined ? `.${joined}` : ''}: ${msg}`);
    }
  }

  return { values, workflow, fileInputs };
}

/**
 * A workflow's parameters (the spec's ParameterDef list) as a JSON Schema (draft 2020-12) of the
 * run's `parameters` object, so a model can build a valid run (the MCP tool get_workflow): types,
 * required, min/max, options (enum), defaults, descriptions. The run itself is validated by
 * resolveRunParameters above; this is a description of the same rules. Built by hand, not by zod's
 * z.toJSONSchema: zod 4 adds the safe-integer bounds to every integer, and any-JSON parameters
 * would become required `{}` entries, so its schema would not be this one.
 */
export interface ParametersJsonSchema {
  $schema: string;
  type: 'object';
  properties: Record<string, Record<string, unknown>>;
  required: string[];
  additionalProperties: boolean;
}

export function parametersJsonSchema(params: readonly NormalizedParameterDef[]): ParametersJsonSchema {
  const properties: Record<string, Record<string, unknown>> = {};
  const required: string[] = [];
  for (const p of params) {
    const s: Record<string, unknown> = {};
    switch (p.type) {
      case 'string':
        s.type = 'string';
        if (p.options) s.enum = [...p.options];
        break;
      case 'integer':
      case 'number':
        s.type = p.type;
        if (p.min !== undefined) s.minimum = p.min;
        if (p.max !== undefined) s.maximum = p.max;
        break;
      case 'boolean':
        s.type = 'boolean';
        break;
      case 'file':
        s.type = 'string';
        s.format = 'gantry-file-key';
        break;
      case 'json':
        // any JSON value
        break;
    }
    if (p.label) s.title = p.label;
    const notes: string[] = [];
    if (p.description) notes.push(p.description);
    if (p.type === 'file') {
      notes.push('A file_key from create_upload (upload the file to the returned upload_url first).');
      if (p.accept) notes.push(`Accepted kinds: ${p.accept.join(', ')}.`);
    }
    if (p.source_key) notes.push(`When omitted, takes the value of parameter "${p.source_key}".`);
    if (notes.length) s.description = notes.join(' ');
    if (p.default !== undefined) s.default = p.default;
    properties[p.key] = s;
    // a parameter with a default or a source is never missing
    if (p.required === true && p.default === undefined && p.source_key === undefined) required.push(p.key);
  }
  return { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', properties, required, additionalProperties: false };
}
