// Original file: proto/agent/v1/agent.proto

import type { Hello as _gantry_agent_v1_Hello, Hello__Output as _gantry_agent_v1_Hello__Output } from '../../../gantry/agent/v1/Hello.js';
import type { Heartbeat as _gantry_agent_v1_Heartbeat, Heartbeat__Output as _gantry_agent_v1_Heartbeat__Output } from '../../../gantry/agent/v1/Heartbeat.js';
import type { TaskAck as _gantry_agent_v1_TaskAck, TaskAck__Output as _gantry_agent_v1_TaskAck__Output } from '../../../gantry/agent/v1/TaskAck.js';
import type { TaskProvisioned as _gantry_agent_v1_TaskProvisioned, TaskProvisioned__Output as _gantry_agent_v1_TaskProvisioned__Output } from '../../../gantry/agent/v1/TaskProvisioned.js';
import type { TaskProgress as _gantry_agent_v1_TaskProgress, TaskProgress__Output as _gantry_agent_v1_TaskProgress__Output } from '../../../gantry/agent/v1/TaskProgress.js';
import type { TaskResult as _gantry_agent_v1_TaskResult, TaskResult__Output as _gantry_agent_v1_TaskResult__Output } from '../../../gantry/agent/v1/TaskResult.js';
import type { TaskFailure as _gantry_agent_v1_TaskFailure, TaskFailure__Output as _gantry_agent_v1_TaskFailure__Output } from '../../../gantry/agent/v1/TaskFailure.js';
import type { Credit as _gantry_agent_v1_Credit, Credit__Output as _gantry_agent_v1_Credit__Output } from '../../../gantry/agent/v1/Credit.js';
import type { Inventory as _gantry_agent_v1_Inventory, Inventory__Output as _gantry_agent_v1_Inventory__Output } from '../../../gantry/agent/v1/Inventory.js';
import type { AgentStatus as _gantry_agent_v1_AgentStatus, AgentStatus__Output as _gantry_agent_v1_AgentStatus__Output } from '../../../gantry/agent/v1/AgentStatus.js';
import type { ContainerReport as _gantry_agent_v1_ContainerReport, ContainerReport__Output as _gantry_agent_v1_ContainerReport__Output } from '../../../gantry/agent/v1/ContainerReport.js';
import type { TunnelFrame as _gantry_agent_v1_TunnelFrame, TunnelFrame__Output as _gantry_agent_v1_TunnelFrame__Output } from '../../../gantry/agent/v1/TunnelFrame.js';
import type { TunnelBatch as _gantry_agent_v1_TunnelBatch, TunnelBatch__Output as _gantry_agent_v1_TunnelBatch__Output } from '../../../gantry/agent/v1/TunnelBatch.js';

export interface AgentMessage {
  'hello'?: (_gantry_agent_v1_Hello | null);
  'heartbeat'?: (_gantry_agent_v1_Heartbeat | null);
  'ack'?: (_gantry_agent_v1_TaskAck | null);
  'provisioned'?: (_gantry_agent_v1_TaskProvisioned | null);
  'progress'?: (_gantry_agent_v1_TaskProgress | null);
  'result'?: (_gantry_agent_v1_TaskResult | null);
  'failure'?: (_gantry_agent_v1_TaskFailure | null);
  'credit'?: (_gantry_agent_v1_Credit | null);
  'inventory'?: (_gantry_agent_v1_Inventory | null);
  'status'?: (_gantry_agent_v1_AgentStatus | null);
  /**
   * State and health of a container service instance (on every change).
   */
  'container'?: (_gantry_agent_v1_ContainerReport | null);
  /**
   * Gateway tunnel (outside the message window: each tunnel stream has its own byte window).
   */
  'tunnel'?: (_gantry_agent_v1_TunnelFrame | null);
  /**
   * Several tunnel frames in one message (what a sender has ready in one event-loop turn).
   */
  'tunnels'?: (_gantry_agent_v1_TunnelBatch | null);
  'msg'?: "hello"|"heartbeat"|"ack"|"provisioned"|"progress"|"result"|"failure"|"credit"|"inventory"|"status"|"container"|"tunnel"|"tunnels";
}

export interface AgentMessage__Output {
  'hello'?: (_gantry_agent_v1_Hello__Output | null);
  'heartbeat'?: (_gantry_agent_v1_Heartbeat__Output | null);
  'ack'?: (_gantry_agent_v1_TaskAck__Output | null);
  'provisioned'?: (_gantry_agent_v1_TaskProvisioned__Output | null);
  'progress'?: (_gantry_agent_v1_TaskProgress__Output | null);
  'result'?: (_gantry_agent_v1_TaskResult__Output | null);
  'failure'?: (_gantry_agent_v1_TaskFailure__Output | null);
  'credit'?: (_gantry_agent_v1_Credit__Output | null);
  'inventory'?: (_gantry_agent_v1_Inventory__Output | null);
  'status'?: (_gantry_agent_v1_AgentStatus__Output | null);
  /**
   * State and health of a container service instance (on every change).
   */
  'container'?: (_gantry_agent_v1_ContainerReport__Output | null);
  /**
   * Gateway tunnel (outside the message window: each tunnel stream has its own byte window).
   */
  'tunnel'?: (_gantry_agent_v1_TunnelFrame__Output | null);
  /**
   * Several tunnel frames in one message (what a sender has ready in one event-loop turn).
   */
  'tunnels'?: (_gantry_agent_v1_TunnelBatch__Output | null);
  'msg'?: "hello"|"heartbeat"|"ack"|"provisioned"|"progress"|"result"|"failure"|"credit"|"inventory"|"status"|"container"|"tunnel"|"tunnels";
}
