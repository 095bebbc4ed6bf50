// Original file: proto/agent/v1/agent.proto

import type { Welcome as _gantry_agent_v1_Welcome, Welcome__Output as _gantry_agent_v1_Welcome__Output } from '../../../gantry/agent/v1/Welcome.js';
import type { Assign as _gantry_agent_v1_Assign, Assign__Output as _gantry_agent_v1_Assign__Output } from '../../../gantry/agent/v1/Assign.js';
import type { Cancel as _gantry_agent_v1_Cancel, Cancel__Output as _gantry_agent_v1_Cancel__Output } from '../../../gantry/agent/v1/Cancel.js';
import type { Drain as _gantry_agent_v1_Drain, Drain__Output as _gantry_agent_v1_Drain__Output } from '../../../gantry/agent/v1/Drain.js';
import type { Credit as _gantry_agent_v1_Credit, Credit__Output as _gantry_agent_v1_Credit__Output } from '../../../gantry/agent/v1/Credit.js';
import type { ServerError as _gantry_agent_v1_ServerError, ServerError__Output as _gantry_agent_v1_ServerError__Output } from '../../../gantry/agent/v1/ServerError.js';
import type { SyncHint as _gantry_agent_v1_SyncHint, SyncHint__Output as _gantry_agent_v1_SyncHint__Output } from '../../../gantry/agent/v1/SyncHint.js';
import type { ContainerCommand as _gantry_agent_v1_ContainerCommand, ContainerCommand__Output as _gantry_agent_v1_ContainerCommand__Output } from '../../../gantry/agent/v1/ContainerCommand.js';
import type { TunnelFrame as _gantry_agent_v1_TunnelFrame, TunnelFrame__Output as _gantry_agent_v1_TunnelFrame__Output } from '../../../gantry/agent/v1/TunnelFrame.js';
import type { TunnelBatch as _gantry_agent_v1_TunnelBatch, TunnelBatch__Output as _gantry_agent_v1_TunnelBatch__Output } from '../../../gantry/agent/v1/TunnelBatch.js';

export interface ServerMessage {
  'welcome'?: (_gantry_agent_v1_Welcome | null);
  'assign'?: (_gantry_agent_v1_Assign | null);
  'cancel'?: (_gantry_agent_v1_Cancel | null);
  'drain'?: (_gantry_agent_v1_Drain | null);
  'credit'?: (_gantry_agent_v1_Credit | null);
  'error'?: (_gantry_agent_v1_ServerError | null);
  /**
   * The team's active models or custom nodes changed: call GetSyncManifest and sync.
   */
  'sync'?: (_gantry_agent_v1_SyncHint | null);
  /**
   * Start, stop or remove a container service instance.
   */
  'container'?: (_gantry_agent_v1_ContainerCommand | null);
  /**
   * Gateway tunnel (outside the message window: each tunnel stream has its own byte window).
   */
  'tunnel'?: (_gantry_agent_v1_TunnelFrame | null);
  /**
   * Several tunnel frames in one message (what a sender has ready in one event-loop turn).
   */
  'tunnels'?: (_gantry_agent_v1_TunnelBatch | null);
  'msg'?: "welcome"|"assign"|"cancel"|"drain"|"credit"|"error"|"sync"|"container"|"tunnel"|"tunnels";
}

export interface ServerMessage__Output {
  'welcome'?: (_gantry_agent_v1_Welcome__Output | null);
  'assign'?: (_gantry_agent_v1_Assign__Output | null);
  'cancel'?: (_gantry_agent_v1_Cancel__Output | null);
  'drain'?: (_gantry_agent_v1_Drain__Output | null);
  'credit'?: (_gantry_agent_v1_Credit__Output | null);
  'error'?: (_gantry_agent_v1_ServerError__Output | null);
  /**
   * The team's active models or custom nodes changed: call GetSyncManifest and sync.
   */
  'sync'?: (_gantry_agent_v1_SyncHint__Output | null);
  /**
   * Start, stop or remove a container service instance.
   */
  'container'?: (_gantry_agent_v1_ContainerCommand__Output | null);
  /**
   * Gateway tunnel (outside the message window: each tunnel stream has its own byte window).
   */
  'tunnel'?: (_gantry_agent_v1_TunnelFrame__Output | null);
  /**
   * Several tunnel frames in one message (what a sender has ready in one event-loop turn).
   */
  'tunnels'?: (_gantry_agent_v1_TunnelBatch__Output | null);
  'msg'?: "welcome"|"assign"|"cancel"|"drain"|"credit"|"error"|"sync"|"container"|"tunnel"|"tunnels";
}
