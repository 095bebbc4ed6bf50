// Original file: proto/agent/v1/agent.proto

import type { TunnelFrame as _gantry_agent_v1_TunnelFrame, TunnelFrame__Output as _gantry_agent_v1_TunnelFrame__Output } from '../../../gantry/agent/v1/TunnelFrame.js';

export interface TunnelBatch {
  'frames'?: (_gantry_agent_v1_TunnelFrame)[];
}

export interface TunnelBatch__Output {
  'frames': (_gantry_agent_v1_TunnelFrame__Output)[];
}
