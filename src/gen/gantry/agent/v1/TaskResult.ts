// Original file: proto/agent/v1/agent.proto

import type { OutputFile as _gantry_agent_v1_OutputFile, OutputFile__Output as _gantry_agent_v1_OutputFile__Output } from '../../../gantry/agent/v1/OutputFile.js';
import type { Long } from '@grpc/proto-loader';

export interface TaskResult {
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
  /**
   * The primary output (outputs[0]).
   */
  'storage_key'?: (string);
  'storage_keys'?: (string)[];
  'image_count'?: (number);
  'outputs'?: (_gantry_agent_v1_OutputFile)[];
  /**
   * Optional tool-specific extras (a JSON object), merged into the task output.
   */
  'extra_json'?: (string);
  /**
   * W3C traceparent of the agent's span for this run ('' when tracing is off): the node's
   * completion span is its child.
   */
  'traceparent'?: (string);
}

export interface TaskResult__Output {
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
  /**
   * The primary output (outputs[0]).
   */
  'storage_key': (string);
  'storage_keys': (string)[];
  'image_count': (number);
  'outputs': (_gantry_agent_v1_OutputFile__Output)[];
  /**
   * Optional tool-specific extras (a JSON object), merged into the task output.
   */
  'extra_json': (string);
  /**
   * W3C traceparent of the agent's span for this run ('' when tracing is off): the node's
   * completion span is its child.
   */
  'traceparent': (string);
}
