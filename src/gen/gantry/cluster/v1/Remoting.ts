// Original file: proto/cluster/v1/remoting.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { Frame as _gantry_cluster_v1_Frame, Frame__Output as _gantry_cluster_v1_Frame__Output } from '../../../gantry/cluster/v1/Frame.js';

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
  
}

export interface RemotingHandlers extends grpc.UntypedServiceImplementation {
  /**
   * One long-lived ordered stream per (sending node, receiving node): envelopes flow from the
   * caller, replies to its asks flow back on the same stream. Ordering per stream keeps the
   * order of tells from one node to one actor.
   */
  Deliver: grpc.handleBidiStreamingCall<_gantry_cluster_v1_Frame__Output, _gantry_cluster_v1_Frame>;
  
}

export interface RemotingDefinition extends grpc.ServiceDefinition {
  Deliver: MethodDefinition<_gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame__Output, _gantry_cluster_v1_Frame__Output>
}
