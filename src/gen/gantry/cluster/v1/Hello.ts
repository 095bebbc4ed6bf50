// Original file: proto/cluster/v1/remoting.proto

import type { Long } from '@grpc/proto-loader';

/**
 * First frame of a stream: who is calling, and which membership view it routes with. The
 * receiving node answers with its own Hello (member_id and protocol_version), so that each side
 * knows which protocol the other speaks; a node of the first release (protocol 1) sends no
 * protocol_version (0 on the wire) and answers with no Hello.
 */
export interface Hello {
  'member_id'?: (string);
  'view_version'?: (number | string | Long);
  /**
   * The remoting protocol the sender speaks (src/cluster/protocol-version.ts); 0: protocol 1.
   */
  'protocol_version'?: (number);
}

/**
 * First frame of a stream: who is calling, and which membership view it routes with. The
 * receiving node answers with its own Hello (member_id and protocol_version), so that each side
 * knows which protocol the other speaks; a node of the first release (protocol 1) sends no
 * protocol_version (0 on the wire) and answers with no Hello.
 */
export interface Hello__Output {
  'member_id': (string);
  'view_version': (number);
  /**
   * The remoting protocol the sender speaks (src/cluster/protocol-version.ts); 0: protocol 1.
   */
  'protocol_version': (number);
}
