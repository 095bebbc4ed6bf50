// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface CommitCheckpointRequest {
  'session_id'?: (string);
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
  /**
   * As PresignCheckpoint returned it.
   */
  'storage_key'?: (string);
  'step'?: (number);
}

export interface CommitCheckpointRequest__Output {
  'session_id': (string);
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
  /**
   * As PresignCheckpoint returned it.
   */
  'storage_key': (string);
  'step': (number);
}
