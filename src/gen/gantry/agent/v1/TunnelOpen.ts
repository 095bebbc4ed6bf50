// Original file: proto/agent/v1/agent.proto

import type { Header as _gantry_agent_v1_Header, Header__Output as _gantry_agent_v1_Header__Output } from '../../../gantry/agent/v1/Header.js';

export interface TunnelOpen {
  /**
   * The container instance; "" = the agent's own tunnel target (its exposed local port).
   */
  'instance_id'?: (string);
  'method'?: (string);
  /**
   * Path and query, starting with "/".
   */
  'path'?: (string);
  'headers'?: (_gantry_agent_v1_Header)[];
  'body'?: (Buffer | Uint8Array | string);
  /**
   * No body follows.
   */
  'end'?: (boolean);
  'websocket'?: (boolean);
  /**
   * Body bytes the agent may send before credit.
   */
  'window'?: (number);
  /**
   * Until the response head (0 = none).
   */
  'timeout_ms'?: (number);
}

export interface TunnelOpen__Output {
  /**
   * The container instance; "" = the agent's own tunnel target (its exposed local port).
   */
  'instance_id': (string);
  'method': (string);
  /**
   * Path and query, starting with "/".
   */
  'path': (string);
  'headers': (_gantry_agent_v1_Header__Output)[];
  'body': (Buffer);
  /**
   * No body follows.
   */
  'end': (boolean);
  'websocket': (boolean);
  /**
   * Body bytes the agent may send before credit.
   */
  'window': (number);
  /**
   * Until the response head (0 = none).
   */
  'timeout_ms': (number);
}
