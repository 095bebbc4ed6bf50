// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface TaskRef {
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
}

export interface TaskRef__Output {
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
}
