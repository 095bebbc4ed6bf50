// Original file: proto/agent/v1/agent.proto

import type { AgentMessage as _gantry_agent_v1_AgentMessage, AgentMessage__Output as _gantry_agent_v1_AgentMessage__Output } from '../../../gantry/agent/v1/AgentMessage.js';
import type { UnaryRequest as _gantry_agent_v1_UnaryRequest, UnaryRequest__Output as _gantry_agent_v1_UnaryRequest__Output } from '../../../gantry/agent/v1/UnaryRequest.js';

export interface AgentFrame {
  'message'?: (_gantry_agent_v1_AgentMessage | null);
  'request'?: (_gantry_agent_v1_UnaryRequest | null);
  'frame'?: "message"|"request";
}

export interface AgentFrame__Output {
  'message'?: (_gantry_agent_v1_AgentMessage__Output | null);
  'request'?: (_gantry_agent_v1_UnaryRequest__Output | null);
  'frame'?: "message"|"request";
}
