// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface Cancel {
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
}

export interface Cancel__Output {
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
}
