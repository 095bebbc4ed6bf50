// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface TaskFailure {
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
  /**
   * Shown to the task's owner (e.g. ComfyUI's exception message).
   */
  'error'?: (string);
  /**
   * tool_error, cancelled, timeout, bad_input, upload_failed, download_failed, shutting_down
   */
  'code'?: (string);
  /**
   * W3C traceparent of the agent's span for this run ('' when tracing is off).
   */
  'traceparent'?: (string);
}

export interface TaskFailure__Output {
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
  /**
   * Shown to the task's owner (e.g. ComfyUI's exception message).
   */
  'error': (string);
  /**
   * tool_error, cancelled, timeout, bad_input, upload_failed, download_failed, shutting_down
   */
  'code': (string);
  /**
   * W3C traceparent of the agent's span for this run ('' when tracing is off).
   */
  'traceparent': (string);
}
