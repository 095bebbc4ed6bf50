// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface PresignedUpload {
  'name'?: (string);
  'storage_key'?: (string);
  'upload_url'?: (string);
  /**
   * Send every header verbatim.
   */
  'upload_headers'?: ({[key: string]: string});
  'expires_at_ms'?: (number | string | Long);
}

export interface PresignedUpload__Output {
  'name': (string);
  'storage_key': (string);
  'upload_url': (string);
  /**
   * Send every header verbatim.
   */
  'upload_headers': ({[key: string]: string});
  'expires_at_ms': (number);
}
