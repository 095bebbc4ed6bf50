// Original file: proto/agent/v1/agent.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { AgentFrame as _gantry_agent_v1_AgentFrame, AgentFrame__Output as _gantry_agent_v1_AgentFrame__Output } from '../../../gantry/agent/v1/AgentFrame.js';
import type { ServerFrame as _gantry_agent_v1_ServerFrame, ServerFrame__Output as _gantry_agent_v1_ServerFrame__Output } from '../../../gantry/agent/v1/ServerFrame.js';

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
export interface AgentWebSocketClient extends grpc.Client {
  Connect(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_agent_v1_AgentFrame, _gantry_agent_v1_ServerFrame__Output>;
  Connect(options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_agent_v1_AgentFrame, _gantry_agent_v1_ServerFrame__Output>;
  connect(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_agent_v1_AgentFrame, _gantry_agent_v1_ServerFrame__Output>;
  connect(options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_agent_v1_AgentFrame, _gantry_agent_v1_ServerFrame__Output>;
  
}

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
export interface AgentWebSocketHandlers extends grpc.UntypedServiceImplementation {
  Connect: grpc.handleBidiStreamingCall<_gantry_agent_v1_AgentFrame__Output, _gantry_agent_v1_ServerFrame>;
  
}

export interface AgentWebSocketDefinition extends grpc.ServiceDefinition {
  Connect: MethodDefinition<_gantry_agent_v1_AgentFrame, _gantry_agent_v1_ServerFrame, _gantry_agent_v1_AgentFrame__Output, _gantry_agent_v1_ServerFrame__Output>
}
