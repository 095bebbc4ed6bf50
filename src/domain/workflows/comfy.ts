/**
 * ComfyUI API-format graphs ("Save (API)" / "Export (API)"):
 *
 *   { "<node_id>": { "class_type": "KSampler", "inputs": { "seed": 1, "model": ["4", 0] }, "_meta": { "title": "KSampler" } } }
 *
 * An input whose value is an array is a link [source_node_id, output_index] (ComfyUI treats every
 * list input as a link), so every array must be a well-formed link to an existing node. The node
 * catalog (which class_types exist, which inputs they take) is not validated here: that depends on
 * the agent's installed custom nodes.
 */
import { invalidParameter } from '../../shared/errors.js';
import { RESERVED_KEYS, isPlainObject } from './values.js';

export interface ComfyNode {
  class_type: string;
  inputs: Record<string, unknown>;
  _meta?: { title?: string };
  [extra: string]: unknown;
}
export type ComfyGraph = Record<string, ComfyNode>;
export type ComfyLink = [string, number];

/** Upper bound on nodes per graph; real graphs have tens to a few hundred. */
export const MAX_COMFY_NODES = 5000;

export function isComfyLink(v: unknown): v is ComfyLink {
  return Array.isArray(v) && v.length === 2 && typeof v[0] === 'string' && typeof v[1] === 'number' && Number.isInteger(v[1]) && v[1] >= 0;
}

const q = (s: string): string => JSON.stringify(s);

/**
 * Validates the structure of a ComfyUI API-format graph. Throws a 400 naming the node (and input)
 * at fault; returns the same object typed as a graph.
 */
export function validateComfyGraph(json: unknown, path = 'workflow_json'): ComfyGraph {
  if (!isPlainObject(json)) throw invalidParameter(`${path}: must be a ComfyUI API-format graph object {node_id: {class_type, inputs}}`);
  const ids = Object.keys(json);
  if (Array.isArray(json['nodes']) && Array.isArray(json['links'])) {
    throw invalidParameter(`${path}: this is ComfyUI's UI workflow format; export the graph with "Save (API)" / "Export (API)" instead`);
  }
  if (ids.length === 0) throw invalidParameter(`${path}: the graph has no nodes`);
  if (ids.length > MAX_COMFY_NODES) throw invalidParameter(`${path}: the graph has ${ids.length} nodes (max ${MAX_COMFY_NODES})`);

  for (const id of ids) {
    if (RESERVED_KEYS.has(id) || id.length === 0) throw invalidParameter(`${path}: node id ${q(id)} is not allowed`);
    const node = json[id];
    if (!isPlainObject(node)) throw invalidParameter(`${path}: node ${q(id)} must be an object {class_type, inputs}`);
    const ct = node['class_type'];
    if (typeof ct !== 'string' || ct.trim().length === 0) throw invalidParameter(`${path}: node ${q(id)} class_type must be a non-empty string`);
    const inputs = node['inputs'];
    if (!isPlainObject(inputs)) throw invalidParameter(`${path}: node ${q(id)} (${ct}) inputs must be an object`);
    if ('_meta' in node) {
      const meta = node['_meta'];
      if (!isPlainObject(meta)) throw invalidParameter(`${path}: node ${q(id)} _meta must be an object`);
      if ('title' in meta && typeof meta['title'] !== 'string') throw invalidParameter(`${path}: node ${q(id)} _meta.title must be a string`);
    }
    for (const [name, value] of Object.entries(inputs)) {
      if (RESERVED_KEYS.has(name)) throw invalidParameter(`${path}: node ${q(id)} input name ${q(name)} is not allowed`);
      if (!Array.isArray(value)) continue;
      if (!isComfyLink(value)) {
        throw invalidParameter(`${path}: node ${q(id)} input ${q(name)} is an array but not a link [node_id (string), output_index (integer >= 0)]`);
      }
      const target = value[0];
      if (!Object.hasOwn(json, target)) throw invalidParameter(`${path}: node ${q(id)} input ${q(name)} links to missing node ${q(target)}`);
      if (target === id) throw invalidParameter(`${path}: node ${q(id)} input ${q(name)} links to its own node`);
    }
  }
  const cycle = findCycle(json as ComfyGraph);
  if (cycle) throw invalidParameter(`${path}: node ${q(cycle[0] ?? '')} is part of a cycle (${cycle.map(q).join(' -> ')})`);
  return json as ComfyGraph;
}

/** Returns one dependency cycle (node ids, first repeated at the end) or null. Iterative DFS. */
function findCycle(graph: ComfyGraph): string[] | null {
  const state = new Map<string, 1 | 2>(); // 1 = on stack, 2 = done
  const deps = (id: string): string[] => {
    const node = graph[id];
    if (!node) return [];
    return Object.values(node.inputs).filter(isComfyLink).map((l) => l[0]);
  };
  for (const start of Object.keys(graph)) {
    if (state.has(start)) continue;
    const stack: Array<{ id: string; next: string[] }> = [{ id: start, next: deps(start) }];
    state.set(start, 1);
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      const n = top.next.pop();
      if (n === undefined) {
        state.set(top.id, 2);
        stack.pop();
        continue;
      }
      const s = state.get(n);
      if (s === 1) {
        const from = stack.findIndex((f) => f.id === n);
        return [...stack.slice(from).map((f) => f.id), n];
      }
      if (s === undefined) {
        state.set(n, 1);
        stack.push({ id: n, next: deps(n) });
      }
    }
  }
  return null;
}
