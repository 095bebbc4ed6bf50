// Original file: proto/agent/v1/agent.proto

import type { OutputFileSpec as _gantry_agent_v1_OutputFileSpec, OutputFileSpec__Output as _gantry_agent_v1_OutputFileSpec__Output } from '../../../gantry/agent/v1/OutputFileSpec.js';
import type { Long } from '@grpc/proto-loader';

export interface PresignOutputsRequest {
  'session_id'?: (string);
  'task_id'?: (string);
  'attempt'?: (number);
  'epoch'?: (number | string | Long);
  'files'?: (_gantry_agent_v1_OutputFileSpec)[];
}

export interface PresignOutputsRequest__Output {
  'session_id': (string);
  'task_id': (string);
  'attempt': (number);
  'epoch': (number);
  'files': (_gantry_agent_v1_OutputFileSpec__Output)[];
}
