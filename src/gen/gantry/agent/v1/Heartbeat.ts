// Original file: proto/agent/v1/agent.proto

import type { GpuStats as _gantry_agent_v1_GpuStats, GpuStats__Output as _gantry_agent_v1_GpuStats__Output } from '../../../gantry/agent/v1/GpuStats.js';
import type { Long } from '@grpc/proto-loader';

export interface Heartbeat {
  'cpu_percent'?: (number | string);
  'ram_used_bytes'?: (number | string | Long);
  'ram_total_bytes'?: (number | string | Long);
  'gpus'?: (_gantry_agent_v1_GpuStats)[];
  'running_tasks'?: (number);
  /**
   * As Hello.loaded_models, now (a change updates the scheduler's view).
   */
  'loaded_models'?: (string)[];
}

export interface Heartbeat__Output {
  'cpu_percent': (number);
  'ram_used_bytes': (number);
  'ram_total_bytes': (number);
  'gpus': (_gantry_agent_v1_GpuStats__Output)[];
  'running_tasks': (number);
  /**
   * As Hello.loaded_models, now (a change updates the scheduler's view).
   */
  'loaded_models': (string)[];
}
