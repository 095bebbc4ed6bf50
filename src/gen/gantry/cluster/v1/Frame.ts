// Original file: proto/cluster/v1/remoting.proto

import type { Hello as _gantry_cluster_v1_Hello, Hello__Output as _gantry_cluster_v1_Hello__Output } from '../../../gantry/cluster/v1/Hello.js';
import type { Envelope as _gantry_cluster_v1_Envelope, Envelope__Output as _gantry_cluster_v1_Envelope__Output } from '../../../gantry/cluster/v1/Envelope.js';
import type { Reply as _gantry_cluster_v1_Reply, Reply__Output as _gantry_cluster_v1_Reply__Output } from '../../../gantry/cluster/v1/Reply.js';

export interface Frame {
  'hello'?: (_gantry_cluster_v1_Hello | null);
  'envelope'?: (_gantry_cluster_v1_Envelope | null);
  'reply'?: (_gantry_cluster_v1_Reply | null);
  'body'?: "hello"|"envelope"|"reply";
}

export interface Frame__Output {
  'hello'?: (_gantry_cluster_v1_Hello__Output | null);
  'envelope'?: (_gantry_cluster_v1_Envelope__Output | null);
  'reply'?: (_gantry_cluster_v1_Reply__Output | null);
  'body'?: "hello"|"envelope"|"reply";
}
