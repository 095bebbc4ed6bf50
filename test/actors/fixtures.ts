import type { TaskRecord } from '../../src/domain/tasks/record.js';
import type { AgentInfo } from '../../src/actors/task-record.js';

export const TEAM = '00000000-0000-7000-8000-000000000001';

export function task(over: Partial<TaskRecord> = {}): TaskRecord {
  return {
    id: over.id ?? '00000000-0000-7000-8000-0000000000aa',
    teamId: TEAM,
    status: 'pending',
    attempt: 1,
    maxRetries: 1,
    leaseEpoch: 0,
    agentId: null,
    dispatchTarget: 'agent',
    toolType: 'comfyui',
    timeoutS: 60,
    requiredLabels: [],
    minVramGb: 0,
    requiredModels: [],
    preferredGpu: null,
    seq: 1,
    startedAt: null,
    createdAt: 0,
    parentTaskId: null,
    retryTaskId: null,
    ...over,
  };
}

export function agentInfo(over: Partial<AgentInfo> = {}): AgentInfo {
  return {
    agentId: 'agent-1',
    teamId: TEAM,
    labels: [],
    gpuType: 'RTX 4090',
    gpuCount: 1,
    vramTotalGb: 24,
    models: [],
    slots: 1,
    draining: false,
    needsSync: false,
    ...over,
  };
}
