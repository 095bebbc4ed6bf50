// Original file: proto/agent/v1/agent.proto

import type { Header as _gantry_agent_v1_Header, Header__Output as _gantry_agent_v1_Header__Output } from '../../../gantry/agent/v1/Header.js';

export interface TunnelHead {
  'status'?: (number);
  'headers'?: (_gantry_agent_v1_Header)[];
  'body'?: (Buffer | Uint8Array | string);
  'end'?: (boolean);
  /**
   * Body bytes the server may send before credit.
   */
  'window'?: (number);
}

export interface TunnelHead__Output {
  'status': (number);
  'headers': (_gantry_agent_v1_Header__Output)[];
  'body': (Buffer);
  'end': (boolean);
  /**
   * Body bytes the server may send before credit.
   */
  'window': (number);
}
