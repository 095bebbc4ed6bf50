// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface OutputFileSpec {
  /**
   * A plain file name (no directories): [A-Za-z0-9._-], 1-200 chars.
   */
  'name'?: (string);
  'size'?: (number | string | Long);
  'content_type'?: (string);
}

export interface OutputFileSpec__Output {
  /**
   * A plain file name (no directories): [A-Za-z0-9._-], 1-200 chars.
   */
  'name': (string);
  'size': (number);
  'content_type': (string);
}
