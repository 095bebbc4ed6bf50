// Original file: proto/agent/v1/agent.proto

import type { SyncModel as _gantry_agent_v1_SyncModel, SyncModel__Output as _gantry_agent_v1_SyncModel__Output } from '../../../gantry/agent/v1/SyncModel.js';
import type { SyncCustomNode as _gantry_agent_v1_SyncCustomNode, SyncCustomNode__Output as _gantry_agent_v1_SyncCustomNode__Output } from '../../../gantry/agent/v1/SyncCustomNode.js';
import type { Long } from '@grpc/proto-loader';

export interface SyncManifest {
  'models'?: (_gantry_agent_v1_SyncModel)[];
  'custom_nodes'?: (_gantry_agent_v1_SyncCustomNode)[];
  /**
   * When the download URLs stop working (ask again after).
   */
  'expires_at_ms'?: (number | string | Long);
}

export interface SyncManifest__Output {
  'models': (_gantry_agent_v1_SyncModel__Output)[];
  'custom_nodes': (_gantry_agent_v1_SyncCustomNode__Output)[];
  /**
   * When the download URLs stop working (ask again after).
   */
  'expires_at_ms': (number);
}
