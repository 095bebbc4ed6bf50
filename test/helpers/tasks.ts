import { randomUUID } from 'node:crypto';
import type { GantryNode } from '../../src/main.js';
import type { TaskStatus } from '../../src/actors/ports.js';
import { TaskQueries } from '../../src/persistence/task-queries.js';
import { SCHEDULER } from '../../src/actors/index.js';
import { uuidv7 } from '../../src/shared/ids.js';

export interface SubmitOptions {
  maxRetries?: number;
  timeoutS?: number;
  requiredLabels?: string[];
  minVramGb?: number;
  requiredModels?: string[];
  preferredGpu?: string | null;
  /** The user the task is "run by" (null: an integration credential's run). */
  createdByUserId?: string | null;
  workflowSlug?: string;
}

/** Inserts a pending task exactly as the run endpoint does (commit, then tell the scheduler). */
export async function submitTask(node: GantryNode, teamId: string, o: SubmitOptions = {}): Promise<string> {
  const id = uuidv7();
  const events = await new TaskQueries(node.db).insert({
    id,
    teamId,
    workflowId: randomUUID(),
    workflowSlug: o.workflowSlug ?? 'test-wf',
    workflowVersion: 1,
    snapshotId: null,
    dispatchTarget: 'agent',
    toolType: 'comfyui',
    parameters: {},
    resolvedWorkflow: { '1': { class_type: 'SaveImage', inputs: {} } },
    inputFiles: [],
    maxRetries: o.maxRetries ?? 0,
    timeoutS: o.timeoutS ?? 0,
    requiredLabels: o.requiredLabels ?? [],
    minVramGb: o.minVramGb ?? 0,
    requiredModels: o.requiredModels ?? [],
    preferredGpu: o.preferredGpu ?? null,
    createdByUserId: o.createdByUserId ?? null,
    createdByCredentialId: null,
  });
  node.events.publish(events);
  node.actors.tell({ kind: SCHEDULER, id: teamId }, { type: 'task_submitted', taskId: id, ...(events.record ? { task: events.record } : {}) });
  return id;
}

/**
 * Waits (on committed events, not sleeps) until the task is in `status`, then until the task
 * actor's turn that made the transition has finished (its timers are armed): a row can be visible
 * in PostgreSQL a moment before the actor has run the transition's effects.
 */
export async function waitForStatus(node: GantryNode, taskId: string, status: TaskStatus | TaskStatus[], timeoutMs = 10_000): Promise<void> {
  await reachStatus(node, taskId, status, timeoutMs);
  await node.actors.ask({ kind: 'task', id: taskId }, { type: 'get' });
}

function reachStatus(node: GantryNode, taskId: string, status: TaskStatus | TaskStatus[], timeoutMs: number): Promise<void> {
  const want = Array.isArray(status) ? status : [status];
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (err?: Error): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      unsub();
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(async () => {
      const t = await node.taskStore.load(taskId);
      finish(new Error(`task ${taskId} not in ${want.join('|')} after ${timeoutMs} ms (is ${t?.status})`));
    }, timeoutMs);
    const unsub = node.events.subscribeTask(taskId, (e) => {
      const s = (e.data as { status?: string }).status;
      if (s && want.includes(s as TaskStatus)) finish();
    });
    void node.taskStore.load(taskId).then((t) => {
      if (t && want.includes(t.status)) finish();
    });
  });
}

export const newTeam = (): string => uuidv7();
