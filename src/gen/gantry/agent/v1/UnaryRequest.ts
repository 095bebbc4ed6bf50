// Original file: proto/agent/v1/agent.proto

import type { PresignOutputsRequest as _gantry_agent_v1_PresignOutputsRequest, PresignOutputsRequest__Output as _gantry_agent_v1_PresignOutputsRequest__Output } from '../../../gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignInputsRequest as _gantry_agent_v1_PresignInputsRequest, PresignInputsRequest__Output as _gantry_agent_v1_PresignInputsRequest__Output } from '../../../gantry/agent/v1/PresignInputsRequest.js';
import type { GetSyncManifestRequest as _gantry_agent_v1_GetSyncManifestRequest, GetSyncManifestRequest__Output as _gantry_agent_v1_GetSyncManifestRequest__Output } from '../../../gantry/agent/v1/GetSyncManifestRequest.js';
import type { PresignCheckpointRequest as _gantry_agent_v1_PresignCheckpointRequest, PresignCheckpointRequest__Output as _gantry_agent_v1_PresignCheckpointRequest__Output } from '../../../gantry/agent/v1/PresignCheckpointRequest.js';
import type { CommitCheckpointRequest as _gantry_agent_v1_CommitCheckpointRequest, CommitCheckpointRequest__Output as _gantry_agent_v1_CommitCheckpointRequest__Output } from '../../../gantry/agent/v1/CommitCheckpointRequest.js';

/**
 * A unary call of AgentService on the socket (outside the message window; at most 64 unanswered
 * per socket).
 */
export interface UnaryRequest {
  /**
   * Chosen by the agent, echoed in the response (1..2^32-1, unique among its unanswered calls).
   */
  'request_id'?: (number);
  'presign_outputs'?: (_gantry_agent_v1_PresignOutputsRequest | null);
  'presign_inputs'?: (_gantry_agent_v1_PresignInputsRequest | null);
  'get_sync_manifest'?: (_gantry_agent_v1_GetSyncManifestRequest | null);
  'presign_checkpoint'?: (_gantry_agent_v1_PresignCheckpointRequest | null);
  'commit_checkpoint'?: (_gantry_agent_v1_CommitCheckpointRequest | null);
  'call'?: "presign_outputs"|"presign_inputs"|"get_sync_manifest"|"presign_checkpoint"|"commit_checkpoint";
}

/**
 * A unary call of AgentService on the socket (outside the message window; at most 64 unanswered
 * per socket).
 */
export interface UnaryRequest__Output {
  /**
   * Chosen by the agent, echoed in the response (1..2^32-1, unique among its unanswered calls).
   */
  'request_id': (number);
  'presign_outputs'?: (_gantry_agent_v1_PresignOutputsRequest__Output | null);
  'presign_inputs'?: (_gantry_agent_v1_PresignInputsRequest__Output | null);
  'get_sync_manifest'?: (_gantry_agent_v1_GetSyncManifestRequest__Output | null);
  'presign_checkpoint'?: (_gantry_agent_v1_PresignCheckpointRequest__Output | null);
  'commit_checkpoint'?: (_gantry_agent_v1_CommitCheckpointRequest__Output | null);
  'call'?: "presign_outputs"|"presign_inputs"|"get_sync_manifest"|"presign_checkpoint"|"commit_checkpoint";
}
