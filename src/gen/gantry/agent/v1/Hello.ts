// Original file: proto/agent/v1/agent.proto

import type { Gpu as _gantry_agent_v1_Gpu, Gpu__Output as _gantry_agent_v1_Gpu__Output } from '../../../gantry/agent/v1/Gpu.js';
import type { ModelFile as _gantry_agent_v1_ModelFile, ModelFile__Output as _gantry_agent_v1_ModelFile__Output } from '../../../gantry/agent/v1/ModelFile.js';
import type { TaskRef as _gantry_agent_v1_TaskRef, TaskRef__Output as _gantry_agent_v1_TaskRef__Output } from '../../../gantry/agent/v1/TaskRef.js';
import type { ContainerReport as _gantry_agent_v1_ContainerReport, ContainerReport__Output as _gantry_agent_v1_ContainerReport__Output } from '../../../gantry/agent/v1/ContainerReport.js';

export interface Hello {
  /**
   * Stable identity of the machine: the same machine_id in the same team is the same agent record.
   */
  'machine_id'?: (string);
  'agent_version'?: (string);
  'display_name'?: (string);
  'labels'?: (string)[];
  'gpus'?: (_gantry_agent_v1_Gpu)[];
  /**
   * Model files relative to the runtime's models root (e.g. checkpoints/sd15.safetensors).
   */
  'models'?: (_gantry_agent_v1_ModelFile)[];
  'custom_nodes'?: (string)[];
  /**
   * Tasks it runs at once (--concurrency).
   */
  'slots'?: (number);
  /**
   * Tasks this process still holds (after a reconnect): re-attached within the grace period.
   */
  'running'?: (_gantry_agent_v1_TaskRef)[];
  /**
   * comfyui, nerfstudio or simulate.
   */
  'executor'?: (string);
  /**
   * Server->agent window (messages the server may have in flight); 0 = the server's default.
   */
  'window'?: (number);
  /**
   * Already draining (connects only to finish what it holds).
   */
  'draining'?: (boolean);
  /**
   * Container runtime it offers for container services: docker, exec or "" (none).
   */
  'container_runtime'?: (string);
  /**
   * The container service instances it holds (after a reconnect), with their current state.
   */
  'containers'?: (_gantry_agent_v1_ContainerReport)[];
  /**
   * The agent exposes a local port through the gateway's agent tunnel (e.g. its ComfyUI UI).
   */
  'tunnel'?: (boolean);
  /**
   * The tool types its executor runs (comfyui, nerfstudio): the scheduler places only those here.
   * Empty (an older agent): derived from `executor` (simulate or unknown: any).
   */
  'tool_types'?: (string)[];
  /**
   * Model paths (under the models root) its runtime holds loaded or its last run used, e.g.
   * checkpoints/sd15.safetensors: the scheduler prefers such a warm agent. Also in Heartbeat.
   */
  'loaded_models'?: (string)[];
  /**
   * The node class_types its ComfyUI lists in /object_info (empty: not ComfyUI, or not read yet):
   * a workflow pushed with a class_type that no agent of the team lists gets a warning.
   */
  'node_classes'?: (string)[];
}

export interface Hello__Output {
  /**
   * Stable identity of the machine: the same machine_id in the same team is the same agent record.
   */
  'machine_id': (string);
  'agent_version': (string);
  'display_name': (string);
  'labels': (string)[];
  'gpus': (_gantry_agent_v1_Gpu__Output)[];
  /**
   * Model files relative to the runtime's models root (e.g. checkpoints/sd15.safetensors).
   */
  'models': (_gantry_agent_v1_ModelFile__Output)[];
  'custom_nodes': (string)[];
  /**
   * Tasks it runs at once (--concurrency).
   */
  'slots': (number);
  /**
   * Tasks this process still holds (after a reconnect): re-attached within the grace period.
   */
  'running': (_gantry_agent_v1_TaskRef__Output)[];
  /**
   * comfyui, nerfstudio or simulate.
   */
  'executor': (string);
  /**
   * Server->agent window (messages the server may have in flight); 0 = the server's default.
   */
  'window': (number);
  /**
   * Already draining (connects only to finish what it holds).
   */
  'draining': (boolean);
  /**
   * Container runtime it offers for container services: docker, exec or "" (none).
   */
  'container_runtime': (string);
  /**
   * The container service instances it holds (after a reconnect), with their current state.
   */
  'containers': (_gantry_agent_v1_ContainerReport__Output)[];
  /**
   * The agent exposes a local port through the gateway's agent tunnel (e.g. its ComfyUI UI).
   */
  'tunnel': (boolean);
  /**
   * The tool types its executor runs (comfyui, nerfstudio): the scheduler places only those here.
   * Empty (an older agent): derived from `executor` (simulate or unknown: any).
   */
  'tool_types': (string)[];
  /**
   * Model paths (under the models root) its runtime holds loaded or its last run used, e.g.
   * checkpoints/sd15.safetensors: the scheduler prefers such a warm agent. Also in Heartbeat.
   */
  'loaded_models': (string)[];
  /**
   * The node class_types its ComfyUI lists in /object_info (empty: not ComfyUI, or not read yet):
   * a workflow pushed with a class_type that no agent of the team lists gets a warning.
   */
  'node_classes': (string)[];
}
