/** The installation-wide figures /metrics shows (counted in PostgreSQL by src/persistence/ops-queries.ts). */

/** Open tasks of one team in one state. */
export interface TaskCount {
  teamId: string;
  status: string;
  count: number;
}

/** Tasks waiting for an agent (pending + waiting) of one team and one required-label set. */
export interface QueueFigure {
  teamId: string;
  /** The required labels, sorted and comma-joined ('' = no label required). */
  labels: string;
  depth: number;
  /** Seconds since the oldest of them became schedulable (created, or its retry backoff ended). */
  oldestAgeS: number;
}

/**
 * Tasks waiting for an agent of one pool: team, required-label set, tool_type and GPU type (the
 * workflow's preferred_gpu, '' = any): what an autoscaler scales one node pool by.
 */
export interface PoolFigure {
  teamId: string;
  labels: string;
  toolType: string;
  gpuType: string;
  depth: number;
  oldestAgeS: number;
}

/** GPU-seconds of every ended attempt (task_attempts) of one team, workflow and GPU type ('' = none; the provider for cloud attempts). */
export interface GpuSecondsFigure {
  teamId: string;
  workflowId: string;
  gpuType: string;
  gpuSeconds: number;
}

export interface AgentCount {
  status: string;
  /** The agent's GPU model ('' = none reported). */
  gpuType: string;
  count: number;
}

/** What the PostgreSQL-derived gauges of /metrics show: one snapshot of the whole installation. */
export interface OpsSnapshot {
  tasks: TaskCount[];
  queues: QueueFigure[];
  pools: PoolFigure[];
  gpuSeconds: GpuSecondsFigure[];
  agents: AgentCount[];
  webhookBacklog: number;
  webhookOldestAgeS: number;
}
