// Original file: proto/agent/v1/agent.proto


export interface VolumeMount {
  'host_path'?: (string);
  'container_path'?: (string);
}

export interface VolumeMount__Output {
  'host_path': (string);
  'container_path': (string);
}
