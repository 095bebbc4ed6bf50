// Original file: proto/agent/v1/agent.proto


export interface TunnelData {
  'data'?: (Buffer | Uint8Array | string);
  'end'?: (boolean);
}

export interface TunnelData__Output {
  'data': (Buffer);
  'end': (boolean);
}
