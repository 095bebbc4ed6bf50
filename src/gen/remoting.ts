import type * as grpc from '@grpc/grpc-js';
import type { MessageTypeDefinition } from '@grpc/proto-loader';

import type { Envelope as _gantry_cluster_v1_Envelope, Envelope__Output as _gantry_cluster_v1_Envelope__Output } from './gantry/cluster/v1/Envelope.js';
import type { Frame as _gantry_cluster_v1_Frame, Frame__Output as _gantry_cluster_v1_Frame__Output } from './gantry/cluster/v1/Frame.js';
import type { Hello as _gantry_cluster_v1_Hello, Hello__Output as _gantry_cluster_v1_Hello__Output } from './gantry/cluster/v1/Hello.js';
import type { RemotingClient as _gantry_cluster_v1_RemotingClient, RemotingDefinition as _gantry_cluster_v1_RemotingDefinition } from './gantry/cluster/v1/Remoting.js';
import type { Reply as _gantry_cluster_v1_Reply, Reply__Output as _gantry_cluster_v1_Reply__Output } from './gantry/cluster/v1/Reply.js';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  gantry: {
    cluster: {
      v1: {
        Envelope: MessageTypeDefinition<_gantry_cluster_v1_Envelope, _gantry_cluster_v1_Envelope__Output>
        Frame: MessageTypeDefinition<_gantry_cluster_v1_Frame, _gantry_cluster_v1_Frame__Output>
        Hello: MessageTypeDefinition<_gantry_cluster_v1_Hello, _gantry_cluster_v1_Hello__Output>
        Remoting: SubtypeConstructor<typeof grpc.Client, _gantry_cluster_v1_RemotingClient> & { service: _gantry_cluster_v1_RemotingDefinition }
        Reply: MessageTypeDefinition<_gantry_cluster_v1_Reply, _gantry_cluster_v1_Reply__Output>
      }
    }
  }
}

