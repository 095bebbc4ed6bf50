// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface TaskProvisioned {
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
}

export interface TaskProvisioned__Output {
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
}
