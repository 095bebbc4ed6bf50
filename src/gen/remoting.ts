import type * as grpc from '@grpc/grpc-js';
import type { MessageTypeDefinition } from '@grpc/proto-loader';

import type { AgentFrame as _gantry_agent_v1_AgentFrame, AgentFrame__Output as _gantry_agent_v1_AgentFrame__Output } from './gantry/agent/v1/AgentFrame.js';
import type { AgentMessage as _gantry_agent_v1_AgentMessage, AgentMessage__Output as _gantry_agent_v1_AgentMessage__Output } from './gantry/agent/v1/AgentMessage.js';
import type { AgentServiceClient as _gantry_agent_v1_AgentServiceClient, AgentServiceDefinition as _gantry_agent_v1_AgentServiceDefinition } from './gantry/agent/v1/AgentService.js';
import type { AgentStatus as _gantry_agent_v1_AgentStatus, AgentStatus__Output as _gantry_agent_v1_AgentStatus__Output } from './gantry/agent/v1/AgentStatus.js';
import type { AgentWebSocketClient as _gantry_agent_v1_AgentWebSocketClient, AgentWebSocketDefinition as _gantry_agent_v1_AgentWebSocketDefinition } from './gantry/agent/v1/AgentWebSocket.js';
import type { Assign as _gantry_agent_v1_Assign, Assign__Output as _gantry_agent_v1_Assign__Output } from './gantry/agent/v1/Assign.js';
import type { Cancel as _gantry_agent_v1_Cancel, Cancel__Output as _gantry_agent_v1_Cancel__Output } from './gantry/agent/v1/Cancel.js';
import type { CommitCheckpointRequest as _gantry_agent_v1_CommitCheckpointRequest, CommitCheckpointRequest__Output as _gantry_agent_v1_CommitCheckpointRequest__Output } from './gantry/agent/v1/CommitCheckpointRequest.js';
import type { CommitCheckpointResponse as _gantry_agent_v1_CommitCheckpointResponse, CommitCheckpointResponse__Output as _gantry_agent_v1_CommitCheckpointResponse__Output } from './gantry/agent/v1/CommitCheckpointResponse.js';
import type { ContainerCommand as _gantry_agent_v1_ContainerCommand, ContainerCommand__Output as _gantry_agent_v1_ContainerCommand__Output } from './gantry/agent/v1/ContainerCommand.js';
import type { ContainerReport as _gantry_agent_v1_ContainerReport, ContainerReport__Output as _gantry_agent_v1_ContainerReport__Output } from './gantry/agent/v1/ContainerReport.js';
import type { ContainerStart as _gantry_agent_v1_ContainerStart, ContainerStart__Output as _gantry_agent_v1_ContainerStart__Output } from './gantry/agent/v1/ContainerStart.js';
import type { Credit as _gantry_agent_v1_Credit, Credit__Output as _gantry_agent_v1_Credit__Output } from './gantry/agent/v1/Credit.js';
import type { Drain as _gantry_agent_v1_Drain, Drain__Output as _gantry_agent_v1_Drain__Output } from './gantry/agent/v1/Drain.js';
import type { EnvVar as _gantry_agent_v1_EnvVar, EnvVar__Output as _gantry_agent_v1_EnvVar__Output } from './gantry/agent/v1/EnvVar.js';
import type { GetSyncManifestRequest as _gantry_agent_v1_GetSyncManifestRequest, GetSyncManifestRequest__Output as _gantry_agent_v1_GetSyncManifestRequest__Output } from './gantry/agent/v1/GetSyncManifestRequest.js';
import type { Gpu as _gantry_agent_v1_Gpu, Gpu__Output as _gantry_agent_v1_Gpu__Output } from './gantry/agent/v1/Gpu.js';
import type { GpuStats as _gantry_agent_v1_GpuStats, GpuStats__Output as _gantry_agent_v1_GpuStats__Output } from './gantry/agent/v1/GpuStats.js';
import type { Header as _gantry_agent_v1_Header, Header__Output as _gantry_agent_v1_Header__Output } from './gantry/agent/v1/Header.js';
import type { Heartbeat as _gantry_agent_v1_Heartbeat, Heartbeat__Output as _gantry_agent_v1_Heartbeat__Output } from './gantry/agent/v1/Heartbeat.js';
import type { Hello as _gantry_agent_v1_Hello, Hello__Output as _gantry_agent_v1_Hello__Output } from './gantry/agent/v1/Hello.js';
import type { InputFile as _gantry_agent_v1_InputFile, InputFile__Output as _gantry_agent_v1_InputFile__Output } from './gantry/agent/v1/InputFile.js';
import type { Inventory as _gantry_agent_v1_Inventory, Inventory__Output as _gantry_agent_v1_Inventory__Output } from './gantry/agent/v1/Inventory.js';
import type { ModelFile as _gantry_agent_v1_ModelFile, ModelFile__Output as _gantry_agent_v1_ModelFile__Output } from './gantry/agent/v1/ModelFile.js';
import type { OutputFile as _gantry_agent_v1_OutputFile, OutputFile__Output as _gantry_agent_v1_OutputFile__Output } from './gantry/agent/v1/OutputFile.js';
import type { OutputFileSpec as _gantry_agent_v1_OutputFileSpec, OutputFileSpec__Output as _gantry_agent_v1_OutputFileSpec__Output } from './gantry/agent/v1/OutputFileSpec.js';
import type { PresignCheckpointRequest as _gantry_agent_v1_PresignCheckpointRequest, PresignCheckpointRequest__Output as _gantry_agent_v1_PresignCheckpointRequest__Output } from './gantry/agent/v1/PresignCheckpointRequest.js';
import type { PresignCheckpointResponse as _gantry_agent_v1_PresignCheckpointResponse, PresignCheckpointResponse__Output as _gantry_agent_v1_PresignCheckpointResponse__Output } from './gantry/agent/v1/PresignCheckpointResponse.js';
import type { PresignInputsRequest as _gantry_agent_v1_PresignInputsRequest, PresignInputsRequest__Output as _gantry_agent_v1_PresignInputsRequest__Output } from './gantry/agent/v1/PresignInputsRequest.js';
import type { PresignInputsResponse as _gantry_agent_v1_PresignInputsResponse, PresignInputsResponse__Output as _gantry_agent_v1_PresignInputsResponse__Output } from './gantry/agent/v1/PresignInputsResponse.js';
import type { PresignOutputsRequest as _gantry_agent_v1_PresignOutputsRequest, PresignOutputsRequest__Output as _gantry_agent_v1_PresignOutputsRequest__Output } from './gantry/agent/v1/PresignOutputsRequest.js';
import type { PresignOutputsResponse as _gantry_agent_v1_PresignOutputsResponse, PresignOutputsResponse__Output as _gantry_agent_v1_PresignOutputsResponse__Output } from './gantry/agent/v1/PresignOutputsResponse.js';
import type { PresignedDownload as _gantry_agent_v1_PresignedDownload, PresignedDownload__Output as _gantry_agent_v1_PresignedDownload__Output } from './gantry/agent/v1/PresignedDownload.js';
import type { PresignedUpload as _gantry_agent_v1_PresignedUpload, PresignedUpload__Output as _gantry_agent_v1_PresignedUpload__Output } from './gantry/agent/v1/PresignedUpload.js';
import type { ServerError as _gantry_agent_v1_ServerError, ServerError__Output as _gantry_agent_v1_ServerError__Output } from './gantry/agent/v1/ServerError.js';
import type { ServerFrame as _gantry_agent_v1_ServerFrame, ServerFrame__Output as _gantry_agent_v1_ServerFrame__Output } from './gantry/agent/v1/ServerFrame.js';
import type { ServerMessage as _gantry_agent_v1_ServerMessage, ServerMessage__Output as _gantry_agent_v1_ServerMessage__Output } from './gantry/agent/v1/ServerMessage.js';
import type { SyncCustomNode as _gantry_agent_v1_SyncCustomNode, SyncCustomNode__Output as _gantry_agent_v1_SyncCustomNode__Output } from './gantry/agent/v1/SyncCustomNode.js';
import type { SyncHint as _gantry_agent_v1_SyncHint, SyncHint__Output as _gantry_agent_v1_SyncHint__Output } from './gantry/agent/v1/SyncHint.js';
import type { SyncManifest as _gantry_agent_v1_SyncManifest, SyncManifest__Output as _gantry_agent_v1_SyncManifest__Output } from './gantry/agent/v1/SyncManifest.js';
import type { SyncModel as _gantry_agent_v1_SyncModel, SyncModel__Output as _gantry_agent_v1_SyncModel__Output } from './gantry/agent/v1/SyncModel.js';
import type { TaskAck as _gantry_agent_v1_TaskAck, TaskAck__Output as _gantry_agent_v1_TaskAck__Output } from './gantry/agent/v1/TaskAck.js';
import type { TaskFailure as _gantry_agent_v1_TaskFailure, TaskFailure__Output as _gantry_agent_v1_TaskFailure__Output } from './gantry/agent/v1/TaskFailure.js';
import type { TaskProgress as _gantry_agent_v1_TaskProgress, TaskProgress__Output as _gantry_agent_v1_TaskProgress__Output } from './gantry/agent/v1/TaskProgress.js';
import type { TaskProvisioned as _gantry_agent_v1_TaskProvisioned, TaskProvisioned__Output as _gantry_agent_v1_TaskProvisioned__Output } from './gantry/agent/v1/TaskProvisioned.js';
import type { TaskRef as _gantry_agent_v1_TaskRef, TaskRef__Output as _gantry_agent_v1_TaskRef__Output } from './gantry/agent/v1/TaskRef.js';
import type { TaskResult as _gantry_agent_v1_TaskResult, TaskResult__Output as _gantry_agent_v1_TaskResult__Output } from './gantry/agent/v1/TaskResult.js';
import type { TunnelBatch as _gantry_agent_v1_TunnelBatch, TunnelBatch__Output as _gantry_agent_v1_TunnelBatch__Output } from './gantry/agent/v1/TunnelBatch.js';
import type { TunnelData as _gantry_agent_v1_TunnelData, TunnelData__Output as _gantry_agent_v1_TunnelData__Output } from './gantry/agent/v1/TunnelData.js';
import type { TunnelFrame as _gantry_agent_v1_TunnelFrame, TunnelFrame__Output as _gantry_agent_v1_TunnelFrame__Output } from './gantry/agent/v1/TunnelFrame.js';
import type { TunnelHead as _gantry_agent_v1_TunnelHead, TunnelHead__Output as _gantry_agent_v1_TunnelHead__Output } from './gantry/agent/v1/TunnelHead.js';
import type { TunnelOpen as _gantry_agent_v1_TunnelOpen, TunnelOpen__Output as _gantry_agent_v1_TunnelOpen__Output } from './gantry/agent/v1/TunnelOpen.js';
import type { TunnelReset as _gantry_agent_v1_TunnelReset, TunnelReset__Output as _gantry_agent_v1_TunnelReset__Output } from './gantry/agent/v1/TunnelReset.js';
import type { TunnelWindow as _gantry_agent_v1_TunnelWindow, TunnelWindow__Output as _gantry_agent_v1_TunnelWindow__Output } from './gantry/agent/v1/TunnelWindow.js';
import type { TunnelWsMessage as _gantry_agent_v1_TunnelWsMessage, TunnelWsMessage__Output as _gantry_agent_v1_TunnelWsMessage__Output } from './gantry/agent/v1/TunnelWsMessage.js';
import type { UnaryError as _gantry_agent_v1_UnaryError, UnaryError__Output as _gantry_agent_v1_UnaryError__Output } from './gantry/agent/v1/UnaryError.js';
import type { UnaryRequest as _gantry_agent_v1_UnaryRequest, UnaryRequest__Output as _gantry_agent_v1_UnaryRequest__Output } from './gantry/agent/v1/UnaryRequest.js';
import type { UnaryResponse as _gantry_agent_v1_UnaryResponse, UnaryResponse__Output as _gantry_agent_v1_UnaryResponse__Output } from './gantry/agent/v1/UnaryResponse.js';
import type { VolumeMount as _gantry_agent_v1_VolumeMount, VolumeMount__Output as _gantry_agent_v1_VolumeMount__Output } from './gantry/agent/v1/VolumeMount.js';
import type { Welcome as _gantry_agent_v1_Welcome, Welcome__Output as _gantry_agent_v1_Welcome__Output } from './gantry/agent/v1/Welcome.js';
import type { Envelope as _gantry_cluster_v1_Envelope, Envelope__Output as _gantry_cluster_v1_Envelope__Output } from './gantry/cluster/v1/Envelope.js';
import type { Frame as _gantry_cluster_v1_Frame, Frame__Output as _gantry_cluster_v1_Frame__Output } from './gantry/cluster/v1/Frame.js';
import type { Hello as _gantry_cluster_v1_Hello, Hello__Output as _gantry_cluster_v1_Hello__Output } from './gantry/cluster/v1/Hello.js';
import type { RemotingClient as _gantry_cluster_v1_RemotingClient, RemotingDefinition as _gantry_cluster_v1_RemotingDefinition } from './gantry/cluster/v1/Remoting.js';
import type { Reply as _gantry_cluster_v1_Reply, Reply__Output as _gantry_cluster_v1_Reply__Output } from './gantry/cluster/v1/Reply.js';
import type { TunnelChunk as _gantry_cluster_v1_TunnelChunk, TunnelChunk__Output as _gantry_cluster_v1_TunnelChunk__Output } from './gantry/cluster/v1/TunnelChunk.js';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  gantry: {
    agent: {
      v1: {
        AgentFrame: MessageTypeDefinition<_gantry_agent_v1_AgentFrame, _gantry_agent_v1_AgentFrame__Output>
        AgentMessage: MessageTypeDefinition<_gantry_agent_v1_AgentMessage, _gantry_agent_v1_AgentMessage__Output>
        AgentService: SubtypeConstructor<typeof grpc.Client, _gantry_agent_v1_AgentServiceClient> & { service: _gantry_agent_v1_AgentServiceDefinition }
        AgentStatus: MessageTypeDefinition<_gantry_agent_v1_AgentStatus, _gantry_agent_v1_AgentStatus__Output>
        /**
         * The same protocol over a WebSocket on the HTTP port (`GET /api/v1/agents/connect`, the ak- in
         * the handshake's `Authorization: Bearer` header, refused with 401 before the upgrade): for
         * ingresses that pass WebSocket but not HTTP/2 gRPC. Not served over gRPC: this service only names
         * the frames. Every binary WebSocket message the agent sends is one AgentFrame, every one the
         * server sends one ServerFrame. `message` carries the Connect stream's messages unchanged (the same
         * hello/welcome, windows, credit, tunnel frames and container commands); the unary calls travel as
         * `request`/`response` on the same socket, correlated by request_id, authorized by the socket's
         * ak- (checked again on every call). The stream's end is the WebSocket close: code 1000 for a
         * clean end, else 4000 + the gRPC status code the gRPC transport would end with (4016 =
         * UNAUTHENTICATED, 4014 = UNAVAILABLE, ...), the ServerError sent just before it says why.
         */
        AgentWebSocket: SubtypeConstructor<typeof grpc.Client, _gantry_agent_v1_AgentWebSocketClient> & { service: _gantry_agent_v1_AgentWebSocketDefinition }
        Assign: MessageTypeDefinition<_gantry_agent_v1_Assign, _gantry_agent_v1_Assign__Output>
        Cancel: MessageTypeDefinition<_gantry_agent_v1_Cancel, _gantry_agent_v1_Cancel__Output>
        CommitCheckpointRequest: MessageTypeDefinition<_gantry_agent_v1_CommitCheckpointRequest, _gantry_agent_v1_CommitCheckpointRequest__Output>
        CommitCheckpointResponse: MessageTypeDefinition<_gantry_agent_v1_CommitCheckpointResponse, _gantry_agent_v1_CommitCheckpointResponse__Output>
        ContainerCommand: MessageTypeDefinition<_gantry_agent_v1_ContainerCommand, _gantry_agent_v1_ContainerCommand__Output>
        ContainerReport: MessageTypeDefinition<_gantry_agent_v1_ContainerReport, _gantry_agent_v1_ContainerReport__Output>
        ContainerStart: MessageTypeDefinition<_gantry_agent_v1_ContainerStart, _gantry_agent_v1_ContainerStart__Output>
        Credit: MessageTypeDefinition<_gantry_agent_v1_Credit, _gantry_agent_v1_Credit__Output>
        Drain: MessageTypeDefinition<_gantry_agent_v1_Drain, _gantry_agent_v1_Drain__Output>
        EnvVar: MessageTypeDefinition<_gantry_agent_v1_EnvVar, _gantry_agent_v1_EnvVar__Output>
        GetSyncManifestRequest: MessageTypeDefinition<_gantry_agent_v1_GetSyncManifestRequest, _gantry_agent_v1_GetSyncManifestRequest__Output>
        Gpu: MessageTypeDefinition<_gantry_agent_v1_Gpu, _gantry_agent_v1_Gpu__Output>
        GpuStats: MessageTypeDefinition<_gantry_agent_v1_GpuStats, _gantry_agent_v1_GpuStats__Output>
        Header: MessageTypeDefinition<_gantry_agent_v1_Header, _gantry_agent_v1_Header__Output>
        Heartbeat: MessageTypeDefinition<_gantry_agent_v1_Heartbeat, _gantry_agent_v1_Heartbeat__Output>
        Hello: MessageTypeDefinition<_gantry_agent_v1_Hello, _gantry_agent_v1_Hello__Output>
        InputFile: MessageTypeDefinition<_gantry_agent_v1_InputFile, _gantry_agent_v1_InputFile__Output>
        Inventory: MessageTypeDefinition<_gantry_agent_v1_Inventory, _gantry_agent_v1_Inventory__Output>
        ModelFile: MessageTypeDefinition<_gantry_agent_v1_ModelFile, _gantry_agent_v1_ModelFile__Output>
        OutputFile: MessageTypeDefinition<_gantry_agent_v1_OutputFile, _gantry_agent_v1_OutputFile__Output>
        OutputFileSpec: MessageTypeDefinition<_gantry_agent_v1_OutputFileSpec, _gantry_agent_v1_OutputFileSpec__Output>
        PresignCheckpointRequest: MessageTypeDefinition<_gantry_agent_v1_PresignCheckpointRequest, _gantry_agent_v1_PresignCheckpointRequest__Output>
        PresignCheckpointResponse: MessageTypeDefinition<_gantry_agent_v1_PresignCheckpointResponse, _gantry_agent_v1_PresignCheckpointResponse__Output>
        PresignInputsRequest: MessageTypeDefinition<_gantry_agent_v1_PresignInputsRequest, _gantry_agent_v1_PresignInputsRequest__Output>
        PresignInputsResponse: MessageTypeDefinition<_gantry_agent_v1_PresignInputsResponse, _gantry_agent_v1_PresignInputsResponse__Output>
        PresignOutputsRequest: MessageTypeDefinition<_gantry_agent_v1_PresignOutputsRequest, _gantry_agent_v1_PresignOutputsRequest__Output>
        PresignOutputsResponse: MessageTypeDefinition<_gantry_agent_v1_PresignOutputsResponse, _gantry_agent_v1_PresignOutputsResponse__Output>
        PresignedDownload: MessageTypeDefinition<_gantry_agent_v1_PresignedDownload, _gantry_agent_v1_PresignedDownload__Output>
        PresignedUpload: MessageTypeDefinition<_gantry_agent_v1_PresignedUpload, _gantry_agent_v1_PresignedUpload__Output>
        ServerError: MessageTypeDefinition<_gantry_agent_v1_ServerError, _gantry_agent_v1_ServerError__Output>
        ServerFrame: MessageTypeDefinition<_gantry_agent_v1_ServerFrame, _gantry_agent_v1_ServerFrame__Output>
        ServerMessage: MessageTypeDefinition<_gantry_agent_v1_ServerMessage, _gantry_agent_v1_ServerMessage__Output>
        SyncCustomNode: MessageTypeDefinition<_gantry_agent_v1_SyncCustomNode, _gantry_agent_v1_SyncCustomNode__Output>
        SyncHint: MessageTypeDefinition<_gantry_agent_v1_SyncHint, _gantry_agent_v1_SyncHint__Output>
        SyncManifest: MessageTypeDefinition<_gantry_agent_v1_SyncManifest, _gantry_agent_v1_SyncManifest__Output>
        SyncModel: MessageTypeDefinition<_gantry_agent_v1_SyncModel, _gantry_agent_v1_SyncModel__Output>
        TaskAck: MessageTypeDefinition<_gantry_agent_v1_TaskAck, _gantry_agent_v1_TaskAck__Output>
        TaskFailure: MessageTypeDefinition<_gantry_agent_v1_TaskFailure, _gantry_agent_v1_TaskFailure__Output>
        TaskProgress: MessageTypeDefinition<_gantry_agent_v1_TaskProgress, _gantry_agent_v1_TaskProgress__Output>
        TaskProvisioned: MessageTypeDefinition<_gantry_agent_v1_TaskProvisioned, _gantry_agent_v1_TaskProvisioned__Output>
        TaskRef: MessageTypeDefinition<_gantry_agent_v1_TaskRef, _gantry_agent_v1_TaskRef__Output>
        TaskResult: MessageTypeDefinition<_gantry_agent_v1_TaskResult, _gantry_agent_v1_TaskResult__Output>
        TunnelBatch: MessageTypeDefinition<_gantry_agent_v1_TunnelBatch, _gantry_agent_v1_TunnelBatch__Output>
        TunnelData: MessageTypeDefinition<_gantry_agent_v1_TunnelData, _gantry_agent_v1_TunnelData__Output>
        TunnelFrame: MessageTypeDefinition<_gantry_agent_v1_TunnelFrame, _gantry_agent_v1_TunnelFrame__Output>
        TunnelHead: MessageTypeDefinition<_gantry_agent_v1_TunnelHead, _gantry_agent_v1_TunnelHead__Output>
        TunnelOpen: MessageTypeDefinition<_gantry_agent_v1_TunnelOpen, _gantry_agent_v1_TunnelOpen__Output>
        TunnelReset: MessageTypeDefinition<_gantry_agent_v1_TunnelReset, _gantry_agent_v1_TunnelReset__Output>
        TunnelWindow: MessageTypeDefinition<_gantry_agent_v1_TunnelWindow, _gantry_agent_v1_TunnelWindow__Output>
        TunnelWsMessage: MessageTypeDefinition<_gantry_agent_v1_TunnelWsMessage, _gantry_agent_v1_TunnelWsMessage__Output>
        UnaryError: MessageTypeDefinition<_gantry_agent_v1_UnaryError, _gantry_agent_v1_UnaryError__Output>
        UnaryRequest: MessageTypeDefinition<_gantry_agent_v1_UnaryRequest, _gantry_agent_v1_UnaryRequest__Output>
        UnaryResponse: MessageTypeDefinition<_gantry_agent_v1_UnaryResponse, _gantry_agent_v1_UnaryResponse__Output>
        VolumeMount: MessageTypeDefinition<_gantry_agent_v1_VolumeMount, _gantry_agent_v1_VolumeMount__Output>
        Welcome: MessageTypeDefinition<_gantry_agent_v1_Welcome, _gantry_agent_v1_Welcome__Output>
      }
    }
    cluster: {
      v1: {
        Envelope: MessageTypeDefinition<_gantry_cluster_v1_Envelope, _gantry_cluster_v1_Envelope__Output>
        Frame: MessageTypeDefinition<_gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame__Output>
        Hello: MessageTypeDefinition<_gantry_cluster_v1_Hello, _gantry_cluster_v1_Hello__Output>
        Remoting: SubtypeConstructor<typeof grpc.Client, _gantry_cluster_v1_RemotingClient> & { service: _gantry_cluster_v1_RemotingDefinition }
        Reply: MessageTypeDefinition<_gantry_cluster_v1_Reply, _gantry_cluster_v1_Reply__Output>
        TunnelChunk: MessageTypeDefinition<_gantry_cluster_v1_TunnelChunk, _gantry_cluster_v1_TunnelChunk__Output>
      }
    }
  }
}

