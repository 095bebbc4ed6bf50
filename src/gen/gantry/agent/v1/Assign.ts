// Original file: proto/agent/v1/agent.proto

import type { InputFile as _gantry_agent_v1_InputFile, InputFile__Output as _gantry_agent_v1_InputFile__Output } from '../../../gantry/agent/v1/InputFile.js';
import type { Long } from '@grpc/proto-loader';

export interface Assign {
  'task_id'?: (string);
  'attempt'?: (number);
  /**
   * Fencing token: echo it in every message about this task.
   */
  'epoch'?: (number | string | Long);
  /**
   * comfyui or nerfstudio
   */
  'tool_type'?: (string);
  /**
   * The resolved workflow (ComfyUI API graph or nerfstudio spec) as JSON.
   */
  'workflow_json'?: (string);
  /**
   * Resolved parameter values as a JSON object.
   */
  'parameters_json'?: (string);
  'input_files'?: (_gantry_agent_v1_InputFile)[];
  /**
   * Seconds after ACK (0 = the server's maximum).
   */
  'timeout_s'?: (number);
  /**
   * Prepare first (model/custom node sync: GetSyncManifest, download, verify, report inventory),
   * then send provisioned, then ack. The task fails (code download_failed) when the manifest cannot
   * be fetched or a model in required_models cannot be synced; other entries that cannot be synced
   * are skipped and logged by the agent.
   */
  'provision'?: (boolean);
  /**
   * The workflow's required_models (paths relative to the models root).
   */
  'required_models'?: (string)[];
  /**
   * W3C traceparent (https://www.w3.org/TR/trace-context/) of the node's assigning span, '' when
   * tracing is off: the agent's span for this run is its child, so one run is one trace.
   */
  'traceparent'?: (string);
  /**
   * The team's Comfy API key (its Comfy Cloud key), for partner (API) nodes: the ComfyUI executor
   * sends it as extra_data.api_key_comfy_org in POST /prompt. '' unless the team turned it on
   * (PUT /cloud-providers/comfy_cloud {partner_nodes_on_agents: true}). A secret: never logged.
   */
  'comfy_org_api_key'?: (string);
  /**
   * The latest checkpoint an earlier attempt of this task uploaded
   * (CommitCheckpoint), "" = none: training resumes after checkpoint_step (PresignCheckpoint gives
   * its download URL).
   */
  'checkpoint_key'?: (string);
  'checkpoint_step'?: (number);
}

export interface Assign__Output {
  'task_id': (string);
  'attempt': (number);
  /**
   * Fencing token: echo it in every message about this task.
   */
  'epoch': (number);
  /**
   * comfyui or nerfstudio
   */
  'tool_type': (string);
  /**
   * The resolved workflow (ComfyUI API graph or nerfstudio spec) as JSON.
   */
  'workflow_json': (string);
  /**
   * Resolved parameter values as a JSON object.
   */
  'parameters_json': (string);
  'input_files': (_gantry_agent_v1_InputFile__Output)[];
  /**
   * Seconds after ACK (0 = the server's maximum).
   */
  'timeout_s': (number);
  /**
   * Prepare first (model/custom node sync: GetSyncManifest, download, verify, report inventory),
   * then send provisioned, then ack. The task fails (code download_failed) when the manifest cannot
   * be fetched or a model in required_models cannot be synced; other entries that cannot be synced
   * are skipped and logged by the agent.
   */
  'provision': (boolean);
  /**
   * The workflow's required_models (paths relative to the models root).
   */
  'required_models': (string)[];
  /**
   * W3C traceparent (https://www.w3.org/TR/trace-context/) of the node's assigning span, '' when
   * tracing is off: the agent's span for this run is its child, so one run is one trace.
   */
  'traceparent': (string);
  /**
   * The team's Comfy API key (its Comfy Cloud key), for partner (API) nodes: the ComfyUI executor
   * sends it as extra_data.api_key_comfy_org in POST /prompt. '' unless the team turned it on
   * (PUT /cloud-providers/comfy_cloud {partner_nodes_on_agents: true}). A secret: never logged.
   */
  'comfy_org_api_key': (string);
  /**
   * The latest checkpoint an earlier attempt of this task uploaded
   * (CommitCheckpoint), "" = none: training resumes after checkpoint_step (PresignCheckpoint gives
   * its download URL).
   */
  'checkpoint_key': (string);
  'checkpoint_step': (number);
}
