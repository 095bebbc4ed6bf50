// Original file: proto/agent/v1/agent.proto

import type { Long } from '@grpc/proto-loader';

export interface SyncCustomNode {
  'id'?: (string);
  /**
   * The directory under the runtime's custom_nodes dir.
   */
  'package_name'?: (string);
  'node_version'?: (string);
  /**
   * What the agent reports in its inventory once installed: <package_name>@<node_version>.
   */
  'inventory_name'?: (string);
  /**
   * Size and SHA-256 of the package archive (zip or tar.gz).
   */
  'size'?: (number | string | Long);
  'sha256'?: (string);
  'download_url'?: (string);
}

export interface SyncCustomNode__Output {
  'id': (string);
  /**
   * The directory under the runtime's custom_nodes dir.
   */
  'package_name': (string);
  'node_version': (string);
  /**
   * What the agent reports in its inventory once installed: <package_name>@<node_version>.
   */
  'inventory_name': (string);
  /**
   * Size and SHA-256 of the package archive (zip or tar.gz).
   */
  'size': (number);
  'sha256': (string);
  'download_url': (string);
}
