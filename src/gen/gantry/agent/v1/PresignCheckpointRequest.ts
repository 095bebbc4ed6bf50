// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface PresignCheckpointRequest {
  'session_id'?: (string);
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
  /**
   * Bytes of the archive to upload; 0 = no upload URL wanted (download only).
   */
  'size'?: (number | string | Long);
  /**
   * The training step of the checkpoint to upload (objects are write-once: one key per step).
   */
  'step'?: (number);
}

export interface PresignCheckpointRequest__Output {
  'session_id': (string);
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
  /**
   * Bytes of the archive to upload; 0 = no upload URL wanted (download only).
   */
  'size': (number);
  /**
   * The training step of the checkpoint to upload (objects are write-once: one key per step).
   */
  'step': (number);
}
