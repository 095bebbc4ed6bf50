// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface PresignInputsRequest {
  'session_id'?: (string);
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
}

export interface PresignInputsRequest__Output {
  'session_id': (string);
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
}
