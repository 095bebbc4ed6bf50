// Original file: proto/agent/v1/agent.proto


export interface InputFile {
  /**
   * Parameter key the file is bound to.
   */
  'key'?: (string);
  'file_key'?: (string);
  'file_name'?: (string);
  'node_id'?: (string);
  'field'?: (string);
  'target_path'?: (string);
}

export interface InputFile__Output {
  /**
   * Parameter key the file is bound to.
   */
  'key': (string);
  'file_key': (string);
  'file_name': (string);
  'node_id': (string);
  'field': (string);
  'target_path': (string);
}
