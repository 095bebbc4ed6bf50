// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface ModelFile {
  'path'?: (string);
  'size'?: (number | string | Long);
}

export interface ModelFile__Output {
  'path': (string);
  'size': (number);
}
