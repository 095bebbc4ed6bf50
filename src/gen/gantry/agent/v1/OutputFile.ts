// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface OutputFile {
  'name'?: (string);
  'storage_key'?: (string);
  'content_type'?: (string);
  'size'?: (number | string | Long);
}

export interface OutputFile__Output {
  'name': (string);
  'storage_key': (string);
  'content_type': (string);
  'size': (number);
}
