// Original file: proto/agent/v1/agent.proto


export interface TunnelReset {
  /**
   * e.g. connect_failed, instance_not_found, timeout, cancelled, protocol_error
   */
  'code'?: (string);
  'message'?: (string);
}

export interface TunnelReset__Output {
  /**
   * e.g. connect_failed, instance_not_found, timeout, cancelled, protocol_error
   */
  'code': (string);
  'message': (string);
}
