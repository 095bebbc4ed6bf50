// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface TaskProgress {
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
  /**
   * 0..1
   */
  'progress'?: (number | string);
  'step_current'?: (number);
  'step_total'?: (number);
  'current_node'?: (string);
  /**
   * nerfstudio: download, process_data, train, export, upload ("" = none)
   */
  'stage'?: (string);
  'message'?: (string);
}

export interface TaskProgress__Output {
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
  /**
   * 0..1
   */
  'progress': (number);
  'step_current': (number);
  'step_total': (number);
  'current_node': (string);
  /**
   * nerfstudio: download, process_data, train, export, upload ("" = none)
   */
  'stage': (string);
  'message': (string);
}
