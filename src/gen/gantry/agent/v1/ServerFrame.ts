// Original file: proto/agent/v1/agent.proto

import type { ServerMessage as _gantry_agent_v1_ServerMessage, ServerMessage__Output as _gantry_agent_v1_ServerMessage__Output } from '../../../gantry/agent/v1/ServerMessage.js';
import type { UnaryResponse as _gantry_agent_v1_UnaryResponse, UnaryResponse__Output as _gantry_agent_v1_UnaryResponse__Output } from '../../../gantry/agent/v1/UnaryResponse.js';

export interface ServerFrame {
  'message'?: (_gantry_agent_v1_ServerMessage | null);
  'response'?: (_gantry_agent_v1_UnaryResponse | null);
  'frame'?: "message"|"response";
}

export interface ServerFrame__Output {
  'message'?: (_gantry_agent_v1_ServerMessage__Output | null);
  'response'?: (_gantry_agent_v1_UnaryResponse__Output | null);
  'frame'?: "message"|"response";
}
