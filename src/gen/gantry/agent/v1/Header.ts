// Original file: proto/agent/v1/agent.proto


export interface Header {
  'name'?: (string);
  'value'?: (string);
}

export interface Header__Output {
  'name': (string);
  'value': (string);
}
