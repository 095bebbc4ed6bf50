// Original file: proto/agent/v1/agent.proto


/**
 * Stop taking tasks; finish what is running.
 */
export interface Drain {
}

/**
 * Stop taking tasks; finish what is running.
 */
export interface Drain__Output {
}
