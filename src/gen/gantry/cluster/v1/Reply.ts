// Original file: proto/cluster/v1/remoting.proto


export interface Reply {
  'reply_id'?: (string);
  /**
   * The reply value as JSON.
   */
  'ok_json'?: (string);
  /**
   * errorToWire JSON: {kind, code, message, retry_after_s?}
   */
  'error_json'?: (string);
  'result'?: "ok_json"|"error_json";
}

export interface Reply__Output {
  'reply_id': (string);
  /**
   * The reply value as JSON.
   */
  'ok_json'?: (string);
  /**
   * errorToWire JSON: {kind, code, message, retry_after_s?}
   */
  'error_json'?: (string);
  'result'?: "ok_json"|"error_json";
}
