// Original file: proto/agent/v1/agent.proto


/**
 * Returns flow-control units to the peer: `grant` more non-credit messages may be sent.
 */
export interface Credit {
  'grant'?: (number);
}

/**
 * Returns flow-control units to the peer: `grant` more non-credit messages may be sent.
 */
export interface Credit__Output {
  'grant': (number);
}
