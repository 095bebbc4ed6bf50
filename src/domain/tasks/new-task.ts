import type { IdempotencyRecord } from '../idempotency.js';

/** A task as the run use case submits it (one row of the group-committed insert). */
export interface NewTask {
  id: string;
  teamId: string;
  workflowId: string;
  workflowSlug: string;
  workflowVersion: number;
  snapshotId: string | null;
  dispatchTarget: 'agent' | 'comfy_cloud';
  toolType: 'comfyui' | 'nerfstudio';
  parameters: Record<string, unknown>;
  resolvedWorkflow: unknown;
  inputFiles: unknown[];
  maxRetries: number;
  timeoutS: number;
  requiredLabels: string[];
  minVramGb: number;
  requiredModels: string[];
  preferredGpu: string | null;
  createdByUserId: string | null;
  createdByCredentialId: string | null;
  /** 1 (highest) .. 5; absent = 3. */
  priority?: number;
  /** W3C traceparent of the submit span (tracing on). */
  traceParent?: string | null;
  /** Idempotency-Key of the run: recorded in the same statement as the task; when the key is taken, no task is inserted. */
  idempotency?: IdempotencyRecord;
}
