import type { ActorSystemPort, AgentInfo, AgentTransportPort, ServerToAgent } from '../../actors/ports.js';
import { AGENT, envelopes } from '../../actors/index.js';
import { uuidv7 } from '../../shared/ids.js';

export interface AgentSession {
  sessionId: string;
  agentId: string;
  info: AgentInfo;
  /** Delivers a server message down this session's stream; false when it cannot. */
  deliver(msg: ServerToAgent): boolean;
  /** Ends the stream from the server side (revocation, replaced by a newer session). */
  end(reason: string): void;
}

/**
 * The live agent streams on this node, keyed by agent id: the AgentTransportPort the agent actors
 * use. The gRPC stream server (and in-process fake agents in tests) open and close sessions here
 * and feed what the agent says into its actor.
 */
export class AgentSessions implements AgentTransportPort {
  private sessions = new Map<string, AgentSession>();

  constructor(private readonly actors: ActorSystemPort) {}

  send(agentId: string, msg: ServerToAgent): boolean {
    return this.sessions.get(agentId)?.deliver(msg) ?? false;
  }

  session(agentId: string): { sessionId: string; info: AgentInfo } | null {
    const s = this.sessions.get(agentId);
    return s ? { sessionId: s.sessionId, info: s.info } : null;
  }

  /** A newer session of the same agent closes the older stream. */
  open(agentId: string, info: AgentInfo, deliver: (m: ServerToAgent) => boolean, end: (reason: string) => void, running: Array<{ taskId: string; attempt: number; epoch: number }> = []): string {
    const old = this.sessions.get(agentId);
    const sessionId = uuidv7();
    this.sessions.set(agentId, { sessionId, agentId, info, deliver, end });
    if (old) old.end('replaced by a newer connection of the same agent');
    this.actors.tell({ kind: AGENT, id: agentId }, { type: 'connected', sessionId, info, running });
    return sessionId;
  }

  update(agentId: string, sessionId: string, info: AgentInfo): void {
    const s = this.sessions.get(agentId);
    if (!s || s.sessionId !== sessionId) return;
    s.info = info;
    this.actors.tell({ kind: AGENT, id: agentId }, { type: 'update', sessionId, info });
  }

  /** What the agent said on its stream (ack, progress, finished, failed, provisioned), decoded by the agent protocol's schema. */
  fromAgent(agentId: string, sessionId: string, msg: Record<string, unknown>): void {
    this.actors.tell({ kind: AGENT, id: agentId }, envelopes.decodeMsg(AGENT, { ...msg, sessionId }));
  }

  close(agentId: string, sessionId: string): void {
    const s = this.sessions.get(agentId);
    if (!s || s.sessionId !== sessionId) return;
    this.sessions.delete(agentId);
    this.actors.tell({ kind: AGENT, id: agentId }, { type: 'disconnected', sessionId });
  }

  /** Revocation/deletion: end the stream now and release its tasks without a grace period. */
  revoke(agentId: string): void {
    const s = this.sessions.get(agentId);
    this.sessions.delete(agentId);
    s?.end('agent credential revoked or agent deleted');
    this.actors.tell({ kind: AGENT, id: agentId }, { type: 'revoke' });
  }

  count(): number {
    return this.sessions.size;
  }

  all(): AgentSession[] {
    return [...this.sessions.values()];
  }
}
