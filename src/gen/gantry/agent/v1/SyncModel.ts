// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface SyncModel {
  'id'?: (string);
  /**
   * Relative to the agent's models root (e.g. checkpoints/sd15.safetensors).
   */
  'model_path'?: (string);
  'model_type'?: (string);
  'size'?: (number | string | Long);
  /**
   * Lowercase hex SHA-256 of the file.
   */
  'sha256'?: (string);
  /**
   * Presigned GET (until expires_at_ms).
   */
  'download_url'?: (string);
}

export interface SyncModel__Output {
  'id': (string);
  /**
   * Relative to the agent's models root (e.g. checkpoints/sd15.safetensors).
   */
  'model_path': (string);
  'model_type': (string);
  'size': (number);
  /**
   * Lowercase hex SHA-256 of the file.
   */
  'sha256': (string);
  /**
   * Presigned GET (until expires_at_ms).
   */
  'download_url': (string);
}
