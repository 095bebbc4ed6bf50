// Original file: proto/agent/v1/agent.proto


export interface GetSyncManifestRequest {
}

export interface GetSyncManifestRequest__Output {
}
