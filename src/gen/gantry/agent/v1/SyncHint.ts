// Original file: proto/agent/v1/agent.proto


/**
 * Sync now (the agent fetches the manifest; it also syncs on provision and periodically).
 */
export interface SyncHint {
}

/**
 * Sync now (the agent fetches the manifest; it also syncs on provision and periodically).
 */
export interface SyncHint__Output {
}
