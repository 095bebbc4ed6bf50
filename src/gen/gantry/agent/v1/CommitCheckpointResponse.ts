// Original file: proto/agent/v1/agent.proto


export interface CommitCheckpointResponse {
}

export interface CommitCheckpointResponse__Output {
}
