// Original file: proto/agent/v1/agent.proto

import type { PresignedUpload as _gantry_agent_v1_PresignedUpload, PresignedUpload__Output as _gantry_agent_v1_PresignedUpload__Output } from '../../../gantry/agent/v1/PresignedUpload.js';

export interface PresignOutputsResponse {
  'uploads'?: (_gantry_agent_v1_PresignedUpload)[];
}

export interface PresignOutputsResponse__Output {
  'uploads': (_gantry_agent_v1_PresignedUpload__Output)[];
}
