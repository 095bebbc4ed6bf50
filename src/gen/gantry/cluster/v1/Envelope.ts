// Original file: proto/cluster/v1/remoting.proto

import type { Long } from '@grpc/proto-loader';

export interface Envelope {
  /**
   * envelopeCodec JSON: {target: {kind, id}, msg, deadline_ms?, reply?}
   */
  'json'?: (string);
  /**
   * How many times this envelope was re-routed (a node that no longer owns the target forwards it
   * with its newer view; bounded so that disagreeing views cannot bounce a message forever).
   */
  'hops'?: (number);
  /**
   * The sender's membership view version.
   */
  'view_version'?: (number | string | Long);
  /**
   * W3C traceparent of the sender's active span ('' when tracing is off or none is active): the
   * delivery on the receiving node runs in that trace.
   */
  'traceparent'?: (string);
  /**
   * The sender's protocol version (0: protocol 1). A message the receiver cannot decode from a
   * sender of a newer protocol is a message added after the receiver's version: ignored (an ask
   * gets `unsupported_message`), not an error.
   */
  'protocol_version'?: (number);
}

export interface Envelope__Output {
  /**
   * envelopeCodec JSON: {target: {kind, id}, msg, deadline_ms?, reply?}
   */
  'json': (string);
  /**
   * How many times this envelope was re-routed (a node that no longer owns the target forwards it
   * with its newer view; bounded so that disagreeing views cannot bounce a message forever).
   */
  'hops': (number);
  /**
   * The sender's membership view version.
   */
  'view_version': (number);
  /**
   * W3C traceparent of the sender's active span ('' when tracing is off or none is active): the
   * delivery on the receiving node runs in that trace.
   */
  'traceparent': (string);
  /**
   * The sender's protocol version (0: protocol 1). A message the receiver cannot decode from a
   * sender of a newer protocol is a message added after the receiver's version: ignored (an ask
   * gets `unsupported_message`), not an error.
   */
  'protocol_version': (number);
}
