// Original file: proto/agent/v1/agent.proto


export interface Welcome {
  'agent_id'?: (string);
  'session_id'?: (string);
  'heartbeat_interval_s'?: (number);
  /**
   * Agent->server window.
   */
  'window'?: (number);
  'team_id'?: (string);
  'server_version'?: (string);
}

export interface Welcome__Output {
  'agent_id': (string);
  'session_id': (string);
  'heartbeat_interval_s': (number);
  /**
   * Agent->server window.
   */
  'window': (number);
  'team_id': (string);
  'server_version': (string);
}
