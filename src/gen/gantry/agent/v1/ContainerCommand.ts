// Original file: proto/agent/v1/agent.proto

import type { ContainerStart as _gantry_agent_v1_ContainerStart, ContainerStart__Output as _gantry_agent_v1_ContainerStart__Output } from '../../../gantry/agent/v1/ContainerStart.js';

export interface ContainerCommand {
  'start'?: (_gantry_agent_v1_ContainerStart | null);
  /**
   * Stop (keep) the instance.
   */
  'stop'?: (string);
  /**
   * Stop and remove the instance.
   */
  'remove'?: (string);
  'cmd'?: "start"|"stop"|"remove";
}

export interface ContainerCommand__Output {
  'start'?: (_gantry_agent_v1_ContainerStart__Output | null);
  /**
   * Stop (keep) the instance.
   */
  'stop'?: (string);
  /**
   * Stop and remove the instance.
   */
  'remove'?: (string);
  'cmd'?: "start"|"stop"|"remove";
}
