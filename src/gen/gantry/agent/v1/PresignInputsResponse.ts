// Original file: proto/agent/v1/agent.proto

import type { PresignedDownload as _gantry_agent_v1_PresignedDownload, PresignedDownload__Output as _gantry_agent_v1_PresignedDownload__Output } from '../../../gantry/agent/v1/PresignedDownload.js';

export interface PresignInputsResponse {
  'files'?: (_gantry_agent_v1_PresignedDownload)[];
}

export interface PresignInputsResponse__Output {
  'files': (_gantry_agent_v1_PresignedDownload__Output)[];
}
