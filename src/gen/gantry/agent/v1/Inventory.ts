// Original file: proto/agent/v1/agent.proto

import type { ModelFile as _gantry_agent_v1_ModelFile, ModelFile__Output as _gantry_agent_v1_ModelFile__Output } from '../../../gantry/agent/v1/ModelFile.js';

export interface Inventory {
  'models'?: (_gantry_agent_v1_ModelFile)[];
  'custom_nodes'?: (string)[];
  /**
   * As Hello.node_classes, now (ComfyUI restarted with other custom nodes, or its first read).
   */
  'node_classes'?: (string)[];
}

export interface Inventory__Output {
  'models': (_gantry_agent_v1_ModelFile__Output)[];
  'custom_nodes': (string)[];
  /**
   * As Hello.node_classes, now (ComfyUI restarted with other custom nodes, or its first read).
   */
  'node_classes': (string)[];
}
