/**
 * The contract between the agent's task loop and the things that actually run a task on the GPU
 * box (ComfyUI, the nerfstudio CLIs, or the simulator). One `run()` call = one task attempt.
 */

export type ProgressStage = 'download' | 'process_data' | 'train' | 'export' | 'upload';

export interface ProgressTick {
  /** Overall estimate, 0..1. */
  progress: number;
  step_current: number;
  step_total: number;
  current_node: string;
  /** nerfstudio tasks only. */
  stage?: ProgressStage;
  message?: string;
}

export interface InputFile {
  /** Parameter key this file was bound to. */
  key: string;
  fileKey: string;
  fileName: string;
  /** Already downloaded by the agent. */
  localPath: string;
  /** ComfyUI injection target (graph node id). */
  nodeId?: string;
  /** ComfyUI injection target (input field of that node). */
  field?: string;
  /** nerfstudio injection target (dotted path into the spec). */
  targetPath?: string;
  /** Optional MIME type as staged. */
  contentType?: string;
}

export interface ExecContext {
  taskId: string;
  attempt: number;
  toolType: 'comfyui' | 'nerfstudio';
  /** Resolved ComfyUI API graph or nerfstudio spec, parameter values already injected. */
  workflow: unknown;
  parameters: Record<string, unknown>;
  inputFiles: InputFile[];
  /** Empty per-task directory the executor may use. */
  workDir: string;
  /** Aborted on cancel/interrupt. */
  signal: AbortSignal;
  /**
   * The team's Comfy API key for partner (API) nodes (Assign.comfy_org_api_key), present only when
   * the team turned partner_nodes_on_agents on. A secret: never logged, never in an error message.
   */
  comfyOrgApiKey?: string;
  onProgress(t: ProgressTick): void;
  log(msg: string, extra?: Record<string, unknown>): void;
  /** Checkpoints kept across attempts of the task (nerfstudio training); absent: none are kept. */
  checkpoints?: CheckpointStore;
}

/**
 * The node remembers the latest checkpoint uploaded for a task (across attempts and agents) and
 * names it in the next attempt's assignment.
 */
export interface CheckpointStore {
  /** The step of the checkpoint an earlier attempt left (training resumes after it), or null. */
  readonly resumeStep: number | null;
  /** Downloads that checkpoint archive to dest. */
  download(dest: string, signal: AbortSignal): Promise<void>;
  /** Uploads a checkpoint archive of this attempt; the node then remembers it (replacing the previous one). */
  upload(localPath: string, step: number, signal: AbortSignal): Promise<void>;
}

export interface ExecOutput {
  name: string;
  localPath: string;
  contentType: string;
  size: number;
}

/** outputs[0] is the primary output. */
export interface ExecResult {
  outputs: ExecOutput[];
}

export interface Executor {
  readonly name: string;
  run(ctx: ExecContext): Promise<ExecResult>;
  /** Model paths (under the models root) its runtime holds loaded or the last run used: reported for warm placement. */
  loaded?(): string[];
  close?(): Promise<void>;
}

export type ExecutorErrorCode = 'tool_error' | 'cancelled' | 'timeout' | 'bad_input';

/** The only error type executors throw. `message` is safe to show to the task's owner. */
export class ExecutorError extends Error {
  readonly code: ExecutorErrorCode;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: ExecutorErrorCode, message: string, opts: { details?: Record<string, unknown>; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ExecutorError';
    this.code = code;
    this.details = opts.details;
  }
}

export const isExecutorError = (e: unknown): e is ExecutorError => e instanceof ExecutorError;
