// Original file: proto/agent/v1/agent.proto


export interface TunnelWsMessage {
  'data'?: (Buffer | Uint8Array | string);
  'binary'?: (boolean);
  /**
   * The peer closed the WebSocket (with code and reason).
   */
  'close'?: (boolean);
  'close_code'?: (number);
  'close_reason'?: (string);
}

export interface TunnelWsMessage__Output {
  'data': (Buffer);
  'binary': (boolean);
  /**
   * The peer closed the WebSocket (with code and reason).
   */
  'close': (boolean);
  'close_code': (number);
  'close_reason': (string);
}
