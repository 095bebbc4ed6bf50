// Original file: proto/cluster/v1/remoting.proto

import type { Long } from '@grpc/proto-loader';

/**
 * First frame of a stream: who is calling, and which membership view it routes with.
 */
export interface Hello {
  'member_id'?: (string);
  'view_version'?: (number | string | Long);
}

/**
 * First frame of a stream: who is calling, and which membership view it routes with.
 */
export interface Hello__Output {
  'member_id': (string);
  'view_version': (number);
}
