// Original file: proto/agent/v1/agent.proto


export interface ContainerReport {
  'instance_id'?: (string);
  'service_id'?: (string);
  /**
   * starting, running, stopped, failed, removed
   */
  'state'?: (string);
  'healthy'?: (boolean);
  'error'?: (string);
}

export interface ContainerReport__Output {
  'instance_id': (string);
  'service_id': (string);
  /**
   * starting, running, stopped, failed, removed
   */
  'state': (string);
  'healthy': (boolean);
  'error': (string);
}
