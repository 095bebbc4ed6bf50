import type { ActorSystemPort, AgentInfo, AgentTransportPort, ServerToAgent } from '../../actors/ports.js';
import { AGENT } from '../../actors/index.js';
import type { AgentReport } from '../../actors/agent/protocol.js';
import { uuidv7 } from '../../shared/ids.js';
import type { Logger } from '../../shared/logger.js';

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
/** Cluster: where agent streams are (the agent directory); absent on a single node. */
export interface AgentPresence {
  /** This node holds the agent's stream now. */
  opened(agentId: string): void;
  /** The stream closed on this node. */
  closed(agentId: string): void;
  /** Another node holds the agent's stream now. */
  elsewhere(agentId: string): boolean;
}

export class AgentSessions implements AgentTransportPort {
  private sessions = new Map<string, AgentSession>();
  /** Set by the composition root in cluster mode. */
  presence: AgentPresence | null = null;
  /** Ends a stream for good (the gRPC server's kickAgent; set by the composition root). */
  kicker: ((agentId: string) => void) | null = null;

  kick(agentId: string): void {
    if (this.sessions.has(agentId)) this.kicker?.(agentId);
  }

  constructor(private readonly actors: ActorSystemPort) {}

  connectedElsewhere(agentId: string): boolean {
    return !this.sessions.has(agentId) && (this.presence?.elsewhere(agentId) ?? false);
  }

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
    this.presence?.opened(agentId);
    this.actors.tell({ kind: AGENT, id: agentId }, { type: 'connected', sessionId, info, running });
    return sessionId;
  }

  update(agentId: string, sessionId: string, info: AgentInfo): void {
    const s = this.sessions.get(agentId);
    if (!s || s.sessionId !== sessionId) return;
    s.info = info;
    this.actors.tell({ kind: AGENT, id: agentId }, { type: 'update', sessionId, info });
  }

  /** What the agent said on its stream (ack, progress, finished, failed, provisioned), already decoded by wire-schema.ts with the agent protocol's AgentReportMsg. */
  fromAgent(agentId: string, sessionId: string, msg: AgentReport): void {
    this.actors.tell({ kind: AGENT, id: agentId }, { ...msg, sessionId });
  }

  close(agentId: string, sessionId: string): void {
    const s = this.sessions.get(agentId);
    if (!s || s.sessionId !== sessionId) return;
    this.sessions.delete(agentId);
    this.presence?.closed(agentId);
    this.actors.tell({ kind: AGENT, id: agentId }, { type: 'disconnected', sessionId });
  }

  /** Revocation/deletion: end the stream now and release its tasks without a grace period. */
  revoke(agentId: string): void {
    const s = this.sessions.get(agentId);
    this.sessions.delete(agentId);
    if (s) this.presence?.closed(agentId);
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

/**
 * AgentSessions that keep AgentInfo.needsSync current: open() and update() pass through, then the
 * flag is recomputed (from the session's models and the agent record's custom nodes) and, when it
 * differs, the session is updated again (the agent actor tells the scheduler). The check itself is
 * a callback (files.sync.needsSync, wired in main.ts): the files module does not import the edge.
 */
export class SyncAwareSessions extends AgentSessions {
  constructor(
    actors: ActorSystemPort,
    private readonly sync: {
      needsSync(teamId: string, inv: { models: string[]; customNodes: string[] }): Promise<boolean>;
      customNodes(agentId: string): Promise<string[]>;
      logger: Logger;
    },
  ) {
    super(actors);
  }

  override open(agentId: string, info: AgentInfo, deliver: (m: ServerToAgent) => boolean, end: (reason: string) => void, running: Array<{ taskId: string; attempt: number; epoch: number }> = []): string {
    const sid = super.open(agentId, info, deliver, end, running);
    void this.recheck(agentId, sid);
    return sid;
  }

  override update(agentId: string, sessionId: string, info: AgentInfo): void {
    super.update(agentId, sessionId, info);
    void this.recheck(agentId, sessionId);
  }

  private stopped = false;

  /** Node shutdown: no more rechecks (the database is about to close; in-flight ones are moot). */
  stop(): void {
    this.stopped = true;
  }

  /** After a registry change: recompute every live session of the team. */
  refreshTeam(teamId: string): void {
    for (const s of this.all()) if (s.info.teamId === teamId) void this.recheck(s.agentId, s.sessionId);
  }

  private async recheck(agentId: string, sessionId: string): Promise<void> {
    if (this.stopped) return;
    try {
      const s = this.session(agentId);
      if (!s || s.sessionId !== sessionId) return;
      const customNodes = await this.sync.customNodes(agentId);
      const need = await this.sync.needsSync(s.info.teamId, { models: s.info.models, customNodes });
      const cur = this.session(agentId);
      if (!cur || cur.sessionId !== sessionId || cur.info.needsSync === need) return;
      super.update(agentId, sessionId, { ...cur.info, needsSync: need });
    } catch (e) {
      if (this.stopped) return;
      this.sync.logger.warn({ err: e, agent_id: agentId }, 'needsSync check failed');
    }
  }
}
