// Original file: proto/agent/v1/agent.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { AgentMessage as _gantry_agent_v1_AgentMessage, AgentMessage__Output as _gantry_agent_v1_AgentMessage__Output } from '../../../gantry/agent/v1/AgentMessage.js';
import type { CommitCheckpointRequest as _gantry_agent_v1_CommitCheckpointRequest, CommitCheckpointRequest__Output as _gantry_agent_v1_CommitCheckpointRequest__Output } from '../../../gantry/agent/v1/CommitCheckpointRequest.js';
import type { CommitCheckpointResponse as _gantry_agent_v1_CommitCheckpointResponse, CommitCheckpointResponse__Output as _gantry_agent_v1_CommitCheckpointResponse__Output } from '../../../gantry/agent/v1/CommitCheckpointResponse.js';
import type { GetSyncManifestRequest as _gantry_agent_v1_GetSyncManifestRequest, GetSyncManifestRequest__Output as _gantry_agent_v1_GetSyncManifestRequest__Output } from '../../../gantry/agent/v1/GetSyncManifestRequest.js';
import type { PresignCheckpointRequest as _gantry_agent_v1_PresignCheckpointRequest, PresignCheckpointRequest__Output as _gantry_agent_v1_PresignCheckpointRequest__Output } from '../../../gantry/agent/v1/PresignCheckpointRequest.js';
import type { PresignCheckpointResponse as _gantry_agent_v1_PresignCheckpointResponse, PresignCheckpointResponse__Output as _gantry_agent_v1_PresignCheckpointResponse__Output } from '../../../gantry/agent/v1/PresignCheckpointResponse.js';
import type { PresignInputsRequest as _gantry_agent_v1_PresignInputsRequest, PresignInputsRequest__Output as _gantry_agent_v1_PresignInputsRequest__Output } from '../../../gantry/agent/v1/PresignInputsRequest.js';
import type { PresignInputsResponse as _gantry_agent_v1_PresignInputsResponse, PresignInputsResponse__Output as _gantry_agent_v1_PresignInputsResponse__Output } from '../../../gantry/agent/v1/PresignInputsResponse.js';
import type { PresignOutputsRequest as _gantry_agent_v1_PresignOutputsRequest, PresignOutputsRequest__Output as _gantry_agent_v1_PresignOutputsRequest__Output } from '../../../gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignOutputsResponse as _gantry_agent_v1_PresignOutputsResponse, PresignOutputsResponse__Output as _gantry_agent_v1_PresignOutputsResponse__Output } from '../../../gantry/agent/v1/PresignOutputsResponse.js';
import type { ServerMessage as _gantry_agent_v1_ServerMessage, ServerMessage__Output as _gantry_agent_v1_ServerMessage__Output } from '../../../gantry/agent/v1/ServerMessage.js';
import type { SyncManifest as _gantry_agent_v1_SyncManifest, SyncManifest__Output as _gantry_agent_v1_SyncManifest__Output } from '../../../gantry/agent/v1/SyncManifest.js';

export interface AgentServiceClient extends grpc.Client {
  /**
   * After the upload: the node remembers this checkpoint for the task (and its retries), replacing
   * (and deleting) the previous one.
   */
  CommitCheckpoint(argument: _gantry_agent_v1_CommitCheckpointRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_CommitCheckpointResponse__Output>): grpc.ClientUnaryCall;
  CommitCheckpoint(argument: _gantry_agent_v1_CommitCheckpointRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_CommitCheckpointResponse__Output>): grpc.ClientUnaryCall;
  CommitCheckpoint(argument: _gantry_agent_v1_CommitCheckpointRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_CommitCheckpointResponse__Output>): grpc.ClientUnaryCall;
  CommitCheckpoint(argument: _gantry_agent_v1_CommitCheckpointRequest, callback: grpc.requestCallback<_gantry_agent_v1_CommitCheckpointResponse__Output>): grpc.ClientUnaryCall;
  /**
   * After the upload: the node remembers this checkpoint for the task (and its retries), replacing
   * (and deleting) the previous one.
   */
  commitCheckpoint(argument: _gantry_agent_v1_CommitCheckpointRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_CommitCheckpointResponse__Output>): grpc.ClientUnaryCall;
  commitCheckpoint(argument: _gantry_agent_v1_CommitCheckpointRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_CommitCheckpointResponse__Output>): grpc.ClientUnaryCall;
  commitCheckpoint(argument: _gantry_agent_v1_CommitCheckpointRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_CommitCheckpointResponse__Output>): grpc.ClientUnaryCall;
  commitCheckpoint(argument: _gantry_agent_v1_CommitCheckpointRequest, callback: grpc.requestCallback<_gantry_agent_v1_CommitCheckpointResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * The agent's one long-lived stream. The first message must be hello; the server answers welcome.
   */
  Connect(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_agent_v1_AgentMessage, _gantry_agent_v1_ServerMessage__Output>;
  Connect(options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_agent_v1_AgentMessage, _gantry_agent_v1_ServerMessage__Output>;
  /**
   * The agent's one long-lived stream. The first message must be hello; the server answers welcome.
   */
  connect(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_agent_v1_AgentMessage, _gantry_agent_v1_ServerMessage__Output>;
  connect(options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_agent_v1_AgentMessage, _gantry_agent_v1_ServerMessage__Output>;
  
  /**
   * What the team's agents must hold: every active model and custom node package of the caller's
   * team (from the ak-), with presigned download URLs. The full active set, not a diff: the agent
   * compares it with its disk (path, size, SHA-256). Disabled entries are never listed.
   */
  GetSyncManifest(argument: _gantry_agent_v1_GetSyncManifestRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_SyncManifest__Output>): grpc.ClientUnaryCall;
  GetSyncManifest(argument: _gantry_agent_v1_GetSyncManifestRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_SyncManifest__Output>): grpc.ClientUnaryCall;
  GetSyncManifest(argument: _gantry_agent_v1_GetSyncManifestRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_SyncManifest__Output>): grpc.ClientUnaryCall;
  GetSyncManifest(argument: _gantry_agent_v1_GetSyncManifestRequest, callback: grpc.requestCallback<_gantry_agent_v1_SyncManifest__Output>): grpc.ClientUnaryCall;
  /**
   * What the team's agents must hold: every active model and custom node package of the caller's
   * team (from the ak-), with presigned download URLs. The full active set, not a diff: the agent
   * compares it with its disk (path, size, SHA-256). Disabled entries are never listed.
   */
  getSyncManifest(argument: _gantry_agent_v1_GetSyncManifestRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_SyncManifest__Output>): grpc.ClientUnaryCall;
  getSyncManifest(argument: _gantry_agent_v1_GetSyncManifestRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_SyncManifest__Output>): grpc.ClientUnaryCall;
  getSyncManifest(argument: _gantry_agent_v1_GetSyncManifestRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_SyncManifest__Output>): grpc.ClientUnaryCall;
  getSyncManifest(argument: _gantry_agent_v1_GetSyncManifestRequest, callback: grpc.requestCallback<_gantry_agent_v1_SyncManifest__Output>): grpc.ClientUnaryCall;
  
  /**
   * Training checkpoints kept across attempts (nerfstudio): a PUT URL for this attempt's checkpoint
   * (size > 0) and a GET URL for the one the node remembers for the task (the assignment's
   * checkpoint_key), for the agent holding the task at that epoch.
   */
  PresignCheckpoint(argument: _gantry_agent_v1_PresignCheckpointRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignCheckpointResponse__Output>): grpc.ClientUnaryCall;
  PresignCheckpoint(argument: _gantry_agent_v1_PresignCheckpointRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_PresignCheckpointResponse__Output>): grpc.ClientUnaryCall;
  PresignCheckpoint(argument: _gantry_agent_v1_PresignCheckpointRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignCheckpointResponse__Output>): grpc.ClientUnaryCall;
  PresignCheckpoint(argument: _gantry_agent_v1_PresignCheckpointRequest, callback: grpc.requestCallback<_gantry_agent_v1_PresignCheckpointResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Training checkpoints kept across attempts (nerfstudio): a PUT URL for this attempt's checkpoint
   * (size > 0) and a GET URL for the one the node remembers for the task (the assignment's
   * checkpoint_key), for the agent holding the task at that epoch.
   */
  presignCheckpoint(argument: _gantry_agent_v1_PresignCheckpointRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignCheckpointResponse__Output>): grpc.ClientUnaryCall;
  presignCheckpoint(argument: _gantry_agent_v1_PresignCheckpointRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_PresignCheckpointResponse__Output>): grpc.ClientUnaryCall;
  presignCheckpoint(argument: _gantry_agent_v1_PresignCheckpointRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignCheckpointResponse__Output>): grpc.ClientUnaryCall;
  presignCheckpoint(argument: _gantry_agent_v1_PresignCheckpointRequest, callback: grpc.requestCallback<_gantry_agent_v1_PresignCheckpointResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Presigned GET URLs for a task's input files (only for the agent holding the task at that epoch).
   */
  PresignInputs(argument: _gantry_agent_v1_PresignInputsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignInputsResponse__Output>): grpc.ClientUnaryCall;
  PresignInputs(argument: _gantry_agent_v1_PresignInputsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_PresignInputsResponse__Output>): grpc.ClientUnaryCall;
  PresignInputs(argument: _gantry_agent_v1_PresignInputsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignInputsResponse__Output>): grpc.ClientUnaryCall;
  PresignInputs(argument: _gantry_agent_v1_PresignInputsRequest, callback: grpc.requestCallback<_gantry_agent_v1_PresignInputsResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Presigned GET URLs for a task's input files (only for the agent holding the task at that epoch).
   */
  presignInputs(argument: _gantry_agent_v1_PresignInputsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignInputsResponse__Output>): grpc.ClientUnaryCall;
  presignInputs(argument: _gantry_agent_v1_PresignInputsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_PresignInputsResponse__Output>): grpc.ClientUnaryCall;
  presignInputs(argument: _gantry_agent_v1_PresignInputsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignInputsResponse__Output>): grpc.ClientUnaryCall;
  presignInputs(argument: _gantry_agent_v1_PresignInputsRequest, callback: grpc.requestCallback<_gantry_agent_v1_PresignInputsResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Presigned PUT URLs for a task's outputs (only for the agent holding the task at that epoch).
   */
  PresignOutputs(argument: _gantry_agent_v1_PresignOutputsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignOutputsResponse__Output>): grpc.ClientUnaryCall;
  PresignOutputs(argument: _gantry_agent_v1_PresignOutputsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_PresignOutputsResponse__Output>): grpc.ClientUnaryCall;
  PresignOutputs(argument: _gantry_agent_v1_PresignOutputsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignOutputsResponse__Output>): grpc.ClientUnaryCall;
  PresignOutputs(argument: _gantry_agent_v1_PresignOutputsRequest, callback: grpc.requestCallback<_gantry_agent_v1_PresignOutputsResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Presigned PUT URLs for a task's outputs (only for the agent holding the task at that epoch).
   */
  presignOutputs(argument: _gantry_agent_v1_PresignOutputsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignOutputsResponse__Output>): grpc.ClientUnaryCall;
  presignOutputs(argument: _gantry_agent_v1_PresignOutputsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_gantry_agent_v1_PresignOutputsResponse__Output>): grpc.ClientUnaryCall;
  presignOutputs(argument: _gantry_agent_v1_PresignOutputsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_gantry_agent_v1_PresignOutputsResponse__Output>): grpc.ClientUnaryCall;
  presignOutputs(argument: _gantry_agent_v1_PresignOutputsRequest, callback: grpc.requestCallback<_gantry_agent_v1_PresignOutputsResponse__Output>): grpc.ClientUnaryCall;
  
}

export interface AgentServiceHandlers extends grpc.UntypedServiceImplementation {
  /**
   * After the upload: the node remembers this checkpoint for the task (and its retries), replacing
   * (and deleting) the previous one.
   */
  CommitCheckpoint: grpc.handleUnaryCall<_gantry_agent_v1_CommitCheckpointRequest__Output, _gantry_agent_v1_CommitCheckpointResponse>;
  
  /**
   * The agent's one long-lived stream. The first message must be hello; the server answers welcome.
   */
  Connect: grpc.handleBidiStreamingCall<_gantry_agent_v1_AgentMessage__Output, _gantry_agent_v1_ServerMessage>;
  
  /**
   * What the team's agents must hold: every active model and custom node package of the caller's
   * team (from the ak-), with presigned download URLs. The full active set, not a diff: the agent
   * compares it with its disk (path, size, SHA-256). Disabled entries are never listed.
   */
  GetSyncManifest: grpc.handleUnaryCall<_gantry_agent_v1_GetSyncManifestRequest__Output, _gantry_agent_v1_SyncManifest>;
  
  /**
   * Training checkpoints kept across attempts (nerfstudio): a PUT URL for this attempt's checkpoint
   * (size > 0) and a GET URL for the one the node remembers for the task (the assignment's
   * checkpoint_key), for the agent holding the task at that epoch.
   */
  PresignCheckpoint: grpc.handleUnaryCall<_gantry_agent_v1_PresignCheckpointRequest__Output, _gantry_agent_v1_PresignCheckpointResponse>;
  
  /**
   * Presigned GET URLs for a task's input files (only for the agent holding the task at that epoch).
   */
  PresignInputs: grpc.handleUnaryCall<_gantry_agent_v1_PresignInputsRequest__Output, _gantry_agent_v1_PresignInputsResponse>;
  
  /**
   * Presigned PUT URLs for a task's outputs (only for the agent holding the task at that epoch).
   */
  PresignOutputs: grpc.handleUnaryCall<_gantry_agent_v1_PresignOutputsRequest__Output, _gantry_agent_v1_PresignOutputsResponse>;
  
}

export interface AgentServiceDefinition extends grpc.ServiceDefinition {
  CommitCheckpoint: MethodDefinition<_gantry_agent_v1_CommitCheckpointRequest, _gantry_agent_v1_CommitCheckpointResponse, _gantry_agent_v1_CommitCheckpointRequest__Output, _gantry_agent_v1_CommitCheckpointResponse__Output>
  Connect: MethodDefinition<_gantry_agent_v1_AgentMessage, _gantry_agent_v1_ServerMessage, _gantry_agent_v1_AgentMessage__Output, _gantry_agent_v1_ServerMessage__Output>
  GetSyncManifest: MethodDefinition<_gantry_agent_v1_GetSyncManifestRequest, _gantry_agent_v1_SyncManifest, _gantry_agent_v1_GetSyncManifestRequest__Output, _gantry_agent_v1_SyncManifest__Output>
  PresignCheckpoint: MethodDefinition<_gantry_agent_v1_PresignCheckpointRequest, _gantry_agent_v1_PresignCheckpointResponse, _gantry_agent_v1_PresignCheckpointRequest__Output, _gantry_agent_v1_PresignCheckpointResponse__Output>
  PresignInputs: MethodDefinition<_gantry_agent_v1_PresignInputsRequest, _gantry_agent_v1_PresignInputsResponse, _gantry_agent_v1_PresignInputsRequest__Output, _gantry_agent_v1_PresignInputsResponse__Output>
  PresignOutputs: MethodDefinition<_gantry_agent_v1_PresignOutputsRequest, _gantry_agent_v1_PresignOutputsResponse, _gantry_agent_v1_PresignOutputsRequest__Output, _gantry_agent_v1_PresignOutputsResponse__Output>
}
