// Original file: proto/agent/v1/agent.proto


export interface PresignCheckpointResponse {
  /**
   * Where this checkpoint goes (one key per attempt and step; committing it deletes the one it replaces).
   */
  'storage_key'?: (string);
  'upload_url'?: (string);
  'upload_headers'?: ({[key: string]: string});
  /**
   * The remembered checkpoint of the task ("" = none) and its step.
   */
  'download_url'?: (string);
  'step'?: (number);
}

export interface PresignCheckpointResponse__Output {
  /**
   * Where this checkpoint goes (one key per attempt and step; committing it deletes the one it replaces).
   */
  'storage_key': (string);
  'upload_url': (string);
  'upload_headers': ({[key: string]: string});
  /**
   * The remembered checkpoint of the task ("" = none) and its step.
   */
  'download_url': (string);
  'step': (number);
}
