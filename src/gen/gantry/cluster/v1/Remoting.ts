// Original file: proto/cluster/v1/remoting.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { Frame as _gantry_cluster_v1_Frame, Frame__Output as _gantry_cluster_v1_Frame__Output } from '../../../gantry/cluster/v1/Frame.js';
import type { TunnelChunk as _gantry_cluster_v1_TunnelChunk, TunnelChunk__Output as _gantry_cluster_v1_TunnelChunk__Output } from '../../../gantry/cluster/v1/TunnelChunk.js';

export interface RemotingClient extends grpc.Client {
  /**
   * One long-lived ordered stream per (sending node, receiving node): envelopes flow from the
   * caller, replies to its asks flow back on the same stream. Ordering per stream keeps the
   * order of tells from one node to one actor.
   */
  Deliver(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame__Output>;
  Deliver(options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame__Output>;
  /**
   * One long-lived ordered stream per (sending node, receiving node): envelopes flow from the
   * caller, replies to its asks flow back on the same stream. Ordering per stream keeps the
   * order of tells from one node to one actor.
   */
  deliver(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame__Output>;
  deliver(options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame__Output>;
  
  /**
   * A gateway tunnel stream forwarded to the node that holds the agent's stream: one call per
   * proxied request or WebSocket (HTTP/2 flow control of the call is the backpressure between the
   * nodes). The first chunk names the agent and carries the open frame; the node relays frames to
   * and from the agent's stream unchanged (stream ids are per hop).
   */
  Tunnel(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_cluster_v1_TunnelChunk, _gantry_cluster_v1_TunnelChunk__Output>;
  Tunnel(options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_cluster_v1_TunnelChunk, _gantry_cluster_v1_TunnelChunk__Output>;
  /**
   * A gateway tunnel stream forwarded to the node that holds the agent's stream: one call per
   * proxied request or WebSocket (HTTP/2 flow control of the call is the backpressure between the
   * nodes). The first chunk names the agent and carries the open frame; the node relays frames to
   * and from the agent's stream unchanged (stream ids are per hop).
   */
  tunnel(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_cluster_v1_TunnelChunk, _gantry_cluster_v1_TunnelChunk__Output>;
  tunnel(options?: grpc.CallOptions): grpc.ClientDuplexStream<_gantry_cluster_v1_TunnelChunk, _gantry_cluster_v1_TunnelChunk__Output>;
  
}

export interface RemotingHandlers extends grpc.UntypedServiceImplementation {
  /**
   * One long-lived ordered stream per (sending node, receiving node): envelopes flow from the
   * caller, replies to its asks flow back on the same stream. Ordering per stream keeps the
   * order of tells from one node to one actor.
   */
  Deliver: grpc.handleBidiStreamingCall<_gantry_cluster_v1_Frame__Output, _gantry_cluster_v1_Frame>;
  
  /**
   * A gateway tunnel stream forwarded to the node that holds the agent's stream: one call per
   * proxied request or WebSocket (HTTP/2 flow control of the call is the backpressure between the
   * nodes). The first chunk names the agent and carries the open frame; the node relays frames to
   * and from the agent's stream unchanged (stream ids are per hop).
   */
  Tunnel: grpc.handleBidiStreamingCall<_gantry_cluster_v1_TunnelChunk__Output, _gantry_cluster_v1_TunnelChunk>;
  
}

export interface RemotingDefinition extends grpc.ServiceDefinition {
  Deliver: MethodDefinition<_gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame__Output, _gantry_cluster_v1_Frame__Output>
  Tunnel: MethodDefinition<_gantry_cluster_v1_TunnelChunk, _gantry_cluster_v1_TunnelChunk, _gantry_cluster_v1_TunnelChunk__Output, _gantry_cluster_v1_TunnelChunk__Output>
}
