// Original file: proto/cluster/v1/remoting.proto

import type { TunnelFrame as _gantry_agent_v1_TunnelFrame, TunnelFrame__Output as _gantry_agent_v1_TunnelFrame__Output } from '../../../gantry/agent/v1/TunnelFrame.js';

export interface TunnelChunk {
  /**
   * First chunk of the caller only: the agent whose stream carries the tunnel, and its team.
   */
  'agent_id'?: (string);
  'team_id'?: (string);
  'frame'?: (_gantry_agent_v1_TunnelFrame | null);
}

export interface TunnelChunk__Output {
  /**
   * First chunk of the caller only: the agent whose stream carries the tunnel, and its team.
   */
  'agent_id': (string);
  'team_id': (string);
  'frame': (_gantry_agent_v1_TunnelFrame__Output | null);
}
