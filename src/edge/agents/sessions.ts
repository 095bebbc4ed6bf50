import type { ActorSystemPort, AgentInfo, AgentTransportPort, ServerToAgent } from '../../actors/ports.js';
import { AGENT } from '../../actors/index.js';
import type { AgentReport } from '../../actors/agent/protocol.js';
import { uuidv7 } from '../../shared/ids.js';
import type { Logger } from '../../shared/logger.js';
import type { TunnelChannel, TunnelHandlers, TunnelOpenInfo } from '../../gateway/tunnel.js';

export interface AgentSession {
  sessionId: string;
  agentId: string;
  info: AgentInfo;
  /** Delivers a server message down this session's stream; false when it cannot. */
  deliver(msg: ServerToAgent): boolean;
  /** Ends the stream from the server side (revocation, replaced by a newer session). */
  end(reason: string): void;
  /** Opens a gateway tunnel on this session's stream (absent for in-process fakes); null when it cannot. */
  openTunnel?(open: TunnelOpenInfo, h: TunnelHandlers): TunnelChannel | null;
}

/** Cluster: where agent streams are (the agent directory); absent on a single node. */
export interface AgentPresence {
  /** This node holds the agent's stream now. */
  opened(agentId: string): void;
  /** The stream closed on this node. */
  closed(agentId: string): void;
  /** Another node holds the agent's stream now. */
  elsewhere(agentId: string): boolean;
}

/**
 * The agent streams held on this node, keyed by agent id: the sessions' table. The cluster reads
 * it (an agent's actor lives where its stream is; the streams to re-assert in the directory) and
 * is built before the sessions, which need the cluster's directory (AgentPresence): this table is
 * the one port that breaks the cluster <-> sessions cycle. Only AgentSessions writes it.
 */
export class LocalAgentStreams {
  private readonly byAgent = new Map<string, AgentSession>();

  has(agentId: string): boolean {
    return this.byAgent.has(agentId);
  }

  agentIds(): string[] {
    return [...this.byAgent.keys()];
  }

  get(agentId: string): AgentSession | undefined {
    return this.byAgent.get(agentId);
  }

  set(s: AgentSession): void {
    this.byAgent.set(s.agentId, s);
  }

  delete(agentId: string): void {
    this.byAgent.delete(agentId);
  }

  get size(): number {
    return this.byAgent.size;
  }

  all(): AgentSession[] {
    return [...this.byAgent.values()];
  }

  /**
   * Opens a gateway tunnel on the agent's stream on this node (null when it has none here, or it
   * belongs to another team): the local gateway's and the cluster's (other nodes' forwarded
   * tunnels) one way in, so neither needs the transport.
   */
  openTunnel(agentId: string, teamId: string, open: TunnelOpenInfo, h: TunnelHandlers): TunnelChannel | null {
    const s = this.byAgent.get(agentId);
    if (!s || s.info.teamId !== teamId || !s.openTunnel) return null;
    return s.openTunnel(open, h);
  }
}

export interface SessionLinks {
  /** The table of this node's streams, shared with the cluster (a fresh one when absent). */
  streams?: LocalAgentStreams;
  /** Cluster mode: the agent directory (absent on a single node). */
  presence?: AgentPresence | null;
}

/**
 * The live agent streams on this node: the agent actors' transport (with agentTransport below).
 * The gRPC stream server (and in-process fake agents in tests) open and close sessions here and
 * feed what the agent says into its actor.
 */
export class AgentSessions {
  private readonly sessions: LocalAgentStreams;
  private readonly presence: AgentPresence | null;

  constructor(
    private readonly actors: ActorSystemPort,
    links: SessionLinks = {},
  ) {
    this.sessions = links.streams ?? new LocalAgentStreams();
    this.presence = links.presence ?? null;
  }

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
  open(
    agentId: string,
    info: AgentInfo,
    deliver: (m: ServerToAgent) => boolean,
    end: (reason: string) => void,
    running: Array<{ taskId: string; attempt: number; epoch: number }> = [],
    openTunnel?: AgentSession['openTunnel'],
  ): string {
    const old = this.sessions.get(agentId);
    const sessionId = uuidv7();
    this.sessions.set({ sessionId, agentId, info, deliver, end, ...(openTunnel ? { openTunnel } : {}) });
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
    return this.sessions.all();
  }
}

/**
 * The AgentTransportPort the agent actors use: this node's sessions, and the stream server that
 * ends a stream for good (kick: the agent was deleted through another node). Built once both exist.
 */
export function agentTransport(sessions: AgentSessions, streams: { kickAgent(agentId: string): void }): AgentTransportPort {
  return {
    send: (agentId, msg) => sessions.send(agentId, msg),
    session: (agentId) => sessions.session(agentId),
    connectedElsewhere: (agentId) => sessions.connectedElsewhere(agentId),
    kick: (agentId) => {
      if (sessions.session(agentId)) streams.kickAgent(agentId);
    },
  };
}

/**
 * AgentSessions that keep AgentInfo.needsSync current: open() and update() pass through, then the
 * flag is recomputed (from the session's models and the agent record's custom nodes) and, when it
 * differs, the session is updated again (the agent actor tells the scheduler). The check itself is
 * a callback (files.sync.needsSync, wired in src/node/agents.ts): the files module does not import the edge.
 */
export class SyncAwareSessions extends AgentSessions {
  constructor(
    actors: ActorSystemPort,
    private readonly sync: {
      needsSync(teamId: string, inv: { models: string[]; customNodes: string[] }): Promise<boolean>;
      customNodes(agentId: string): Promise<string[]>;
      logger: Logger;
    },
    links: SessionLinks = {},
  ) {
    super(actors, links);
  }

  override open(
    agentId: string,
    info: AgentInfo,
    deliver: (m: ServerToAgent) => boolean,
    end: (reason: string) => void,
    running: Array<{ taskId: string; attempt: number; epoch: number }> = [],
    openTunnel?: AgentSession['openTunnel'],
  ): string {
    const sid = super.open(agentId, info, deliver, end, running, openTunnel);
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
