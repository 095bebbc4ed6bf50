// Original file: proto/agent/v1/agent.proto

import type { PresignOutputsResponse as _gantry_agent_v1_PresignOutputsResponse, PresignOutputsResponse__Output as _gantry_agent_v1_PresignOutputsResponse__Output } from '../../../gantry/agent/v1/PresignOutputsResponse.js';
import type { PresignInputsResponse as _gantry_agent_v1_PresignInputsResponse, PresignInputsResponse__Output as _gantry_agent_v1_PresignInputsResponse__Output } from '../../../gantry/agent/v1/PresignInputsResponse.js';
import type { SyncManifest as _gantry_agent_v1_SyncManifest, SyncManifest__Output as _gantry_agent_v1_SyncManifest__Output } from '../../../gantry/agent/v1/SyncManifest.js';
import type { UnaryError as _gantry_agent_v1_UnaryError, UnaryError__Output as _gantry_agent_v1_UnaryError__Output } from '../../../gantry/agent/v1/UnaryError.js';
import type { PresignCheckpointResponse as _gantry_agent_v1_PresignCheckpointResponse, PresignCheckpointResponse__Output as _gantry_agent_v1_PresignCheckpointResponse__Output } from '../../../gantry/agent/v1/PresignCheckpointResponse.js';
import type { CommitCheckpointResponse as _gantry_agent_v1_CommitCheckpointResponse, CommitCheckpointResponse__Output as _gantry_agent_v1_CommitCheckpointResponse__Output } from '../../../gantry/agent/v1/CommitCheckpointResponse.js';

export interface UnaryResponse {
  'request_id'?: (number);
  'presign_outputs'?: (_gantry_agent_v1_PresignOutputsResponse | null);
  'presign_inputs'?: (_gantry_agent_v1_PresignInputsResponse | null);
  'sync_manifest'?: (_gantry_agent_v1_SyncManifest | null);
  'error'?: (_gantry_agent_v1_UnaryError | null);
  'presign_checkpoint'?: (_gantry_agent_v1_PresignCheckpointResponse | null);
  'commit_checkpoint'?: (_gantry_agent_v1_CommitCheckpointResponse | null);
  'result'?: "presign_outputs"|"presign_inputs"|"sync_manifest"|"error"|"presign_checkpoint"|"commit_checkpoint";
}

export interface UnaryResponse__Output {
  'request_id': (number);
  'presign_outputs'?: (_gantry_agent_v1_PresignOutputsResponse__Output | null);
  'presign_inputs'?: (_gantry_agent_v1_PresignInputsResponse__Output | null);
  'sync_manifest'?: (_gantry_agent_v1_SyncManifest__Output | null);
  'error'?: (_gantry_agent_v1_UnaryError__Output | null);
  'presign_checkpoint'?: (_gantry_agent_v1_PresignCheckpointResponse__Output | null);
  'commit_checkpoint'?: (_gantry_agent_v1_CommitCheckpointResponse__Output | null);
  'result'?: "presign_outputs"|"presign_inputs"|"sync_manifest"|"error"|"presign_checkpoint"|"commit_checkpoint";
}
