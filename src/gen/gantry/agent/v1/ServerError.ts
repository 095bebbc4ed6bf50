// Original file: proto/agent/v1/agent.proto


export interface ServerError {
  /**
   * e.g. agent_deleted, credential_revoked, heartbeat_missed, invalid_message
   */
  'code'?: (string);
  'message'?: (string);
  /**
   * The agent must not reconnect (it exits).
   */
  'fatal'?: (boolean);
}

export interface ServerError__Output {
  /**
   * e.g. agent_deleted, credential_revoked, heartbeat_missed, invalid_message
   */
  'code': (string);
  'message': (string);
  /**
   * The agent must not reconnect (it exits).
   */
  'fatal': (boolean);
}
