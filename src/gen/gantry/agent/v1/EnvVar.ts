// Original file: proto/agent/v1/agent.proto


export interface EnvVar {
  'name'?: (string);
  'value'?: (string);
}

export interface EnvVar__Output {
  'name': (string);
  'value': (string);
}
