// Original file: proto/agent/v1/agent.proto


export interface TunnelWindow {
  'bytes'?: (number);
}

export interface TunnelWindow__Output {
  'bytes': (number);
}
