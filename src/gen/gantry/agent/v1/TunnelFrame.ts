// Original file: proto/agent/v1/agent.proto

import type { TunnelOpen as _gantry_agent_v1_TunnelOpen, TunnelOpen__Output as _gantry_agent_v1_TunnelOpen__Output } from '../../../gantry/agent/v1/TunnelOpen.js';
import type { TunnelHead as _gantry_agent_v1_TunnelHead, TunnelHead__Output as _gantry_agent_v1_TunnelHead__Output } from '../../../gantry/agent/v1/TunnelHead.js';
import type { TunnelData as _gantry_agent_v1_TunnelData, TunnelData__Output as _gantry_agent_v1_TunnelData__Output } from '../../../gantry/agent/v1/TunnelData.js';
import type { TunnelWindow as _gantry_agent_v1_TunnelWindow, TunnelWindow__Output as _gantry_agent_v1_TunnelWindow__Output } from '../../../gantry/agent/v1/TunnelWindow.js';
import type { TunnelReset as _gantry_agent_v1_TunnelReset, TunnelReset__Output as _gantry_agent_v1_TunnelReset__Output } from '../../../gantry/agent/v1/TunnelReset.js';
import type { TunnelWsMessage as _gantry_agent_v1_TunnelWsMessage, TunnelWsMessage__Output as _gantry_agent_v1_TunnelWsMessage__Output } from '../../../gantry/agent/v1/TunnelWsMessage.js';
import type { Long } from '@grpc/proto-loader';

export interface TunnelFrame {
  'stream_id'?: (number | string | Long);
  'open'?: (_gantry_agent_v1_TunnelOpen | null);
  'head'?: (_gantry_agent_v1_TunnelHead | null);
  'data'?: (_gantry_agent_v1_TunnelData | null);
  'window'?: (_gantry_agent_v1_TunnelWindow | null);
  'reset'?: (_gantry_agent_v1_TunnelReset | null);
  'ws'?: (_gantry_agent_v1_TunnelWsMessage | null);
  'frame'?: "open"|"head"|"data"|"window"|"reset"|"ws";
}

export interface TunnelFrame__Output {
  'stream_id': (number);
  'open'?: (_gantry_agent_v1_TunnelOpen__Output | null);
  'head'?: (_gantry_agent_v1_TunnelHead__Output | null);
  'data'?: (_gantry_agent_v1_TunnelData__Output | null);
  'window'?: (_gantry_agent_v1_TunnelWindow__Output | null);
  'reset'?: (_gantry_agent_v1_TunnelReset__Output | null);
  'ws'?: (_gantry_agent_v1_TunnelWsMessage__Output | null);
  'frame'?: "open"|"head"|"data"|"window"|"reset"|"ws";
}
