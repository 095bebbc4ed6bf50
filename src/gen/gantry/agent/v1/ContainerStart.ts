// Original file: proto/agent/v1/agent.proto

import type { EnvVar as _gantry_agent_v1_EnvVar, EnvVar__Output as _gantry_agent_v1_EnvVar__Output } from '../../../gantry/agent/v1/EnvVar.js';
import type { VolumeMount as _gantry_agent_v1_VolumeMount, VolumeMount__Output as _gantry_agent_v1_VolumeMount__Output } from '../../../gantry/agent/v1/VolumeMount.js';

export interface ContainerStart {
  'instance_id'?: (string);
  'service_id'?: (string);
  'service_slug'?: (string);
  /**
   * docker: image reference; exec: the command (JSON argv array or a whitespace-split line).
   */
  'image'?: (string);
  'exposed_port'?: (number);
  'env'?: (_gantry_agent_v1_EnvVar)[];
  'volumes'?: (_gantry_agent_v1_VolumeMount)[];
  /**
   * -1 all GPUs, 0 none, N that many.
   */
  'gpu_count'?: (number);
  /**
   * "" = TCP check only.
   */
  'health_path'?: (string);
}

export interface ContainerStart__Output {
  'instance_id': (string);
  'service_id': (string);
  'service_slug': (string);
  /**
   * docker: image reference; exec: the command (JSON argv array or a whitespace-split line).
   */
  'image': (string);
  'exposed_port': (number);
  'env': (_gantry_agent_v1_EnvVar__Output)[];
  'volumes': (_gantry_agent_v1_VolumeMount__Output)[];
  /**
   * -1 all GPUs, 0 none, N that many.
   */
  'gpu_count': (number);
  /**
   * "" = TCP check only.
   */
  'health_path': (string);
}
