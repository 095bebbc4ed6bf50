// Original file: proto/agent/v1/agent.proto


export interface AgentStatus {
  /**
   * true: take no new tasks (graceful drain); the server stops assigning.
   */
  'draining'?: (boolean);
}

export interface AgentStatus__Output {
  /**
   * true: take no new tasks (graceful drain); the server stops assigning.
   */
  'draining': (boolean);
}
