// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface TaskAck {
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
}

export interface TaskAck__Output {
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
}
