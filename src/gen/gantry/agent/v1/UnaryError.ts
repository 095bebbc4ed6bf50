// Original file: proto/agent/v1/agent.proto


/**
 * The call failed as the gRPC call would have.
 */
export interface UnaryError {
  /**
   * The gRPC status code (e.g. 9 FAILED_PRECONDITION, 14 UNAVAILABLE, 16 UNAUTHENTICATED).
   */
  'status'?: (number);
  'details'?: (string);
}

/**
 * The call failed as the gRPC call would have.
 */
export interface UnaryError__Output {
  /**
   * The gRPC status code (e.g. 9 FAILED_PRECONDITION, 14 UNAVAILABLE, 16 UNAUTHENTICATED).
   */
  'status': (number);
  'details': (string);
}
