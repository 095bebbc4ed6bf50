/**
 * ComfyUI's protocol as both ends of Gantry speak it: the agent's comfyui executor (a local
 * ComfyUI) and the server's cloud dispatcher (Comfy Cloud, the same API under /api). Pure helpers,
 * no I/O: the API-format graph check, the POST /prompt body, the history/outputs layout, the
 * messages of execution errors and prompt validation errors, the WebSocket event switch
 * (readPromptMessage) and the progress tracker that turns its messages (executing, progress,
 * executed, execution_cached) into Gantry progress ticks.
 */
import { isRecord } from '../shared/is-record.js';

const clamp01 = (n: number): number => (Number.isFinite(n) ? Math.min(1, Math.max(0, n)) : 0);

export type ApiGraph = Record<string, { class_type: string; inputs: Record<string, unknown> }>;

/** A deep copy of an API-format graph, or the reason it is not one. */
export function toApiGraph(workflow: unknown): { ok: true; graph: ApiGraph } | { ok: false; error: string } {
  if (!isRecord(workflow)) return { ok: false, error: 'ComfyUI workflow must be an API-format graph object' };
  if (Array.isArray(workflow.nodes) && Array.isArray(workflow.links)) return { ok: false, error: "workflow is in ComfyUI's UI format; export it with 'Save (API Format)'" };
  const graph = structuredClone(workflow) as Record<string, unknown>;
  const out: ApiGraph = {};
  for (const [id, node] of Object.entries(graph)) {
    if (!isRecord(node) || typeof node.class_type !== 'string') return { ok: false, error: `workflow node ${id} has no class_type` };
    if (node.inputs === undefined) node.inputs = {};
    if (!isRecord(node.inputs)) return { ok: false, error: `workflow node ${id} has invalid inputs` };
    out[id] = node as { class_type: string; inputs: Record<string, unknown> };
  }
  if (Object.keys(out).length === 0) return { ok: false, error: 'ComfyUI workflow has no nodes' };
  return { ok: true, graph: out };
}

export interface ComfyFileRef {
  filename: string;
  subfolder: string;
  type: string;
}

/** The node_errors of a rejected prompt as one line: `node 3 (KSampler): Value not in list: ...; ...`. */
export function describeNodeErrors(nodeErrors: unknown): string {
  if (!isRecord(nodeErrors)) return '';
  const parts: string[] = [];
  for (const [id, ne] of Object.entries(nodeErrors)) {
    if (!isRecord(ne)) continue;
    const cls = typeof ne.class_type === 'string' ? ` (${ne.class_type})` : '';
    const errs = Array.isArray(ne.errors) ? ne.errors : [];
    for (const e of errs) {
      if (!isRecord(e)) continue;
      const msg = [e.message, e.details].filter((x) => typeof x === 'string' && x !== '').join(': ');
      parts.push(`node ${id}${cls}: ${msg}`);
    }
  }
  return parts.join('; ');
}

/** The message of a rejected POST /prompt body ({error: {type, message, details} | string, node_errors}). */
export function promptRejection(body: unknown, fallbackText: string): { type: string; message: string } {
  const b = isRecord(body) ? body : {};
  const err = b.error;
  const type = isRecord(err) && typeof err.type === 'string' ? err.type : '';
  const base = isRecord(err)
    ? [err.message, err.details].filter((x) => typeof x === 'string' && x !== '').join(': ')
    : typeof err === 'string'
      ? err
      : typeof b.message === 'string'
        ? b.message
        : fallbackText.slice(0, 300);
  const nodes = describeNodeErrors(b.node_errors);
  return { type, message: `${base}${nodes ? ` (${nodes})` : ''}` };
}

/** The message of an execution_error payload: `ComfyUI error in node 3 (KSampler): RuntimeError: ...`. */
export function executionErrorMessage(data: Record<string, unknown>, who = 'ComfyUI'): string {
  const msg = String(data.exception_message ?? 'unknown error').trim();
  const node = data.node_id !== undefined ? String(data.node_id) : '?';
  const type = typeof data.node_type === 'string' ? ` (${data.node_type})` : '';
  const exType = typeof data.exception_type === 'string' ? `${data.exception_type}: ` : '';
  return `${who} error in node ${node}${type}: ${exType}${msg}`;
}

/** The outcome recorded in a history entry's status.messages (execution_error / execution_interrupted / success). */
export function historyStatus(entry: unknown): { kind: 'success' } | { kind: 'error'; data: Record<string, unknown> | null } | { kind: 'interrupted'; data: Record<string, unknown> } {
  const status = isRecord(entry) && isRecord(entry.status) ? entry.status : null;
  const messages = Array.isArray(status?.messages) ? status.messages : [];
  const find = (t: string): Record<string, unknown> | undefined => {
    for (const m of messages) if (Array.isArray(m) && m[0] === t && isRecord(m[1])) return m[1];
    return undefined;
  };
  const err = find('execution_error');
  if (err) return { kind: 'error', data: err };
  const intr = find('execution_interrupted');
  if (intr) return { kind: 'interrupted', data: intr };
  if (status && status.status_str === 'error') return { kind: 'error', data: null };
  return { kind: 'success' };
}

export interface ProgressTick {
  progress: number;
  step_current: number;
  step_total: number;
  current_node: string;
}

/**
 * Turns executing/progress/executed/execution_cached messages into progress ticks. The overall
 * figure never goes backwards and stays below 1 until the caller reports completion: node expansion
 * (execution.py `execute`, has_subgraph: `dynprompt.add_ephemeral_node`) runs ephemeral nodes whose
 * ids (GraphBuilder prefixes `<parent>.<call>.<graph>.<id>`) are not in the submitted graph; they
 * count as their display node, never as extra nodes.
 */
export class ProgressTracker {
  readonly total: number;
  readonly executedOutputs: Record<string, unknown> = {};
  private readonly done = new Set<string>();
  private readonly displayOf = new Map<string, string>();
  private current: string | undefined;
  private last = 0;

  constructor(
    private readonly graph: Record<string, { class_type: string }>,
    private readonly onProgress: (p: ProgressTick) => void,
  ) {
    this.total = Math.max(1, Object.keys(graph).length);
  }

  private inGraph(node: string): boolean {
    return Object.prototype.hasOwnProperty.call(this.graph, node);
  }

  /** The submitted node a message's node id stands for (itself, or the node that expanded into it). */
  private resolve(node: string, displayNode?: string): string {
    if (this.inGraph(node)) return node;
    if (displayNode !== undefined && this.inGraph(displayNode)) {
      this.displayOf.set(node, displayNode);
      return displayNode;
    }
    const known = this.displayOf.get(node);
    if (known !== undefined) return known;
    const root = node.split('.')[0];
    if (root !== undefined && root !== '' && this.inGraph(root)) return root;
    return node;
  }

  private label(node: string): string {
    const cls = this.graph[node]?.class_type;
    return cls ? `${node} (${cls})` : node;
  }

  private markDone(node: string): void {
    if (this.inGraph(node)) this.done.add(node);
  }

  private emit(node: string, value: number, max: number): void {
    const within = max > 0 ? clamp01(value / max) : 0;
    const completed = this.done.has(node) || !this.inGraph(node) ? this.done.size : this.done.size + within;
    const progress = Math.max(this.last, Math.min(0.99, clamp01(completed / this.total)));
    this.last = progress;
    this.onProgress({
      progress,
      step_current: Math.max(0, Math.floor(value)),
      step_total: Math.max(0, Math.floor(max)),
      current_node: this.label(node),
    });
  }

  cached(nodes: string[]): void {
    for (const n of nodes) this.markDone(this.resolve(n));
  }

  executing(node: string, displayNode?: string): void {
    const n = this.resolve(node, displayNode);
    if (this.current !== undefined && this.current !== n) this.markDone(this.current);
    this.current = n;
    this.emit(n, 0, 1);
  }

  progress(node: string | undefined, value: number, max: number): void {
    const n = node !== undefined ? this.resolve(node) : (this.current ?? '');
    if (node !== undefined && this.current !== n) {
      if (this.current !== undefined) this.markDone(this.current);
      this.current = n;
    }
    this.emit(n, Number.isFinite(value) ? value : 0, Number.isFinite(max) ? max : 0);
  }

  executed(node: string, output: unknown): void {
    this.markDone(this.resolve(node));
    if (isRecord(output)) this.executedOutputs[node] = output;
  }
}

/** One JSON message of ComfyUI's WebSocket (server.py send_json): `{type, data}`. */
export interface ComfyWsMessage {
  type: string;
  data: Record<string, unknown>;
}

/**
 * A /ws frame as a message: null for binary frames (4-byte big-endian type: 1 preview image,
 * 3 text, 4 preview with metadata) and for text that is not a `{type, data}` JSON object.
 */
export function parseWsFrame(frame: { toString(): string }, isBinary: boolean): ComfyWsMessage | null {
  if (isBinary) return null;
  try {
    const m = JSON.parse(frame.toString()) as unknown;
    return isRecord(m) && typeof m.type === 'string' ? { type: m.type, data: isRecord(m.data) ? m.data : {} } : null;
  } catch {
    return null;
  }
}

/**
 * What one /ws message means for the prompt being followed (the one event switch of both ends):
 * - `step`: execution_start, execution_cached, executing {node}, progress, executed; the tracker has
 *   taken it in, and `started` says whether the message shows the prompt executing (executed alone
 *   does not);
 * - `idle`: executing {node: null}, main.py prompt_worker's last word on the prompt (history written);
 * - `success` / `interrupted` / `error`: execution.py's end messages, sent before history is
 *   written; an execution_error may also be an ExecutionBlocker's while the prompt goes on;
 * - `other`: any other message about this prompt.
 */
export type PromptEvent =
  | { kind: 'step'; started: boolean }
  | { kind: 'idle' }
  | { kind: 'success' }
  | { kind: 'interrupted'; data: Record<string, unknown> }
  | { kind: 'error'; data: Record<string, unknown> }
  | { kind: 'other' };

/**
 * Reads a /ws message for `promptId`, feeding the progress messages to `tracker`. Null when the
 * message is not about this prompt: status, progress_state and feature_flags, or another prompt's
 * (Comfy Cloud sends every job of the account to every socket).
 */
export function readPromptMessage(msg: ComfyWsMessage, promptId: string, tracker: ProgressTracker): PromptEvent | null {
  const { type, data } = msg;
  if (type === 'status' || type === 'progress_state' || type === 'feature_flags') return null;
  if (data.prompt_id !== promptId) return null;
  switch (type) {
    case 'execution_start':
      return { kind: 'step', started: true };
    case 'execution_cached':
      tracker.cached(Array.isArray(data.nodes) ? data.nodes.map(String) : []);
      return { kind: 'step', started: true };
    case 'executing':
      if (data.node === null || data.node === undefined) return { kind: 'idle' };
      tracker.executing(String(data.node), typeof data.display_node === 'string' ? data.display_node : undefined);
      return { kind: 'step', started: true };
    case 'progress':
      tracker.progress(typeof data.node === 'string' ? data.node : undefined, Number(data.value ?? 0), Number(data.max ?? 0));
      return { kind: 'step', started: true };
    case 'executed':
      tracker.executed(String(data.node), data.output);
      return { kind: 'step', started: false };
    case 'execution_success':
      return { kind: 'success' };
    case 'execution_interrupted':
      return { kind: 'interrupted', data };
    case 'execution_error':
      return { kind: 'error', data };
    default:
      return { kind: 'other' };
  }
}

/**
 * The POST /prompt body: our prompt_id (server.py post_prompt honours a client-chosen id, so a
 * resubmission after a lost answer can be recognised), the client id whose socket gets the
 * messages, and the key partner (API) nodes read from extra_data.api_key_comfy_org (hidden input
 * API_KEY_COMFY_ORG).
 */
export function promptPayload(graph: Record<string, unknown>, promptId: string, o: { clientId?: string; comfyOrgApiKey?: string | undefined } = {}): Record<string, unknown> {
  return {
    prompt: graph,
    ...(o.clientId !== undefined ? { client_id: o.clientId } : {}),
    prompt_id: promptId,
    ...(o.comfyOrgApiKey ? { extra_data: { api_key_comfy_org: o.comfyOrgApiKey } } : {}),
  };
}

/** The query string of GET /view for one file. */
export const viewQuery = (ref: ComfyFileRef): string => new URLSearchParams({ filename: ref.filename, subfolder: ref.subfolder, type: ref.type }).toString();

/** 3D files a node may report by path (comfy_execution/jobs.py THREE_D_EXTENSIONS). */
const THREE_D_EXTENSIONS = ['.obj', '.fbx', '.gltf', '.glb', '.usdz', '.ply', '.splat', '.spz'];

export interface ComfyOutputs {
  /** Saved files (type `output`), in node order; temp previews are left out. */
  files: ComfyFileRef[];
  /** Text results (PreviewAny / ui.PreviewText `{"text": [...]}`), in node order. */
  texts: Array<{ node: string; text: string }>;
}

const refFromPath = (p: string): ComfyFileRef => {
  const clean = p.replace(/\\/g, '/').replace(/^\/+/, '');
  const i = clean.lastIndexOf('/');
  return { filename: i >= 0 ? clean.slice(i + 1) : clean, subfolder: i >= 0 ? clean.slice(0, i) : '', type: 'output' };
};

/**
 * Every task output in a history `outputs` map (or the `executed` outputs): entries
 * `{filename, subfolder, type}` under any key (images, gifs, audio, video, 3d, ...) whose type is
 * not `temp`; path strings of 3D files (Preview3D's `{"result": [path, camera]}`, the rule of
 * comfy_execution/jobs.py normalize_output_item); `text` strings. `animated` flags are skipped.
 */
export function collectOutputs(outputs: unknown): ComfyOutputs {
  const files: ComfyFileRef[] = [];
  const texts: ComfyOutputs['texts'] = [];
  if (!isRecord(outputs)) return { files, texts };
  const seen = new Set<string>();
  const add = (ref: ComfyFileRef): void => {
    if (ref.type === 'temp' || ref.filename === '' || ref.filename.includes('..')) return;
    const key = `${ref.type}/${ref.subfolder}/${ref.filename}`;
    if (seen.has(key)) return;
    seen.add(key);
    files.push(ref);
  };
  // node order: numeric ids numerically, others as strings
  const nodeIds = Object.keys(outputs).sort((a, b) => {
    const na = Number(a);
    const nb = Number(b);
    return Number.isFinite(na) && Number.isFinite(nb) ? na - nb : a.localeCompare(b);
  });
  for (const id of nodeIds) {
    const nodeOut = outputs[id];
    if (!isRecord(nodeOut)) continue;
    for (const [key, value] of Object.entries(nodeOut)) {
      if (key === 'animated' || !Array.isArray(value)) continue;
      for (const item of value) {
        if (isRecord(item) && typeof item.filename === 'string') {
          add({
            filename: item.filename,
            subfolder: typeof item.subfolder === 'string' ? item.subfolder : '',
            type: typeof item.type === 'string' ? item.type : 'output',
          });
        } else if (typeof item === 'string') {
          if (key === 'text') texts.push({ node: id, text: item });
          else if (THREE_D_EXTENSIONS.some((ext) => item.toLowerCase().endsWith(ext))) add(refFromPath(item));
        }
      }
    }
  }
  return { files, texts };
}

/** Merges the outputs of `executed` messages into a history `outputs` map (history wins per node). */
export function mergeOutputs(history: unknown, executed: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...executed };
  if (isRecord(history)) for (const [k, v] of Object.entries(history)) out[k] = v;
  return out;
}
