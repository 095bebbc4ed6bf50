/**
 * The agent streams of this node, whatever transport carries them (a gRPC call or a WebSocket:
 * an AgentLink): hello and registration, the windows and credit both ways, heartbeats, the task
 * reports forwarded to the agent actor (AgentSessions), tunnels, container reports, and the end of
 * a stream. Every message is decoded once by wire-schema.ts; server -> agent messages are encoded
 * once by the agent-wire codec (src/protocol/agent-wire.ts).
 */
import type { AgentInfo, ServerToAgent } from '../../actors/ports.js';
import { agentInfoOf } from '../../actors/agent/info.js';
import { AppError, conflict, deadlineExceeded, forbidden, invalidParameter, isAppError, unauthorized, unavailable } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { toGrpcError } from '../error-map.js';
import { outputPrefix } from '../../files/keys.js';
import { CreditGate, CreditReturner, DEFAULT_WINDOW, PROTOCOL_VERSION, TunnelBatcher, clampWindow, encodeServerCommand, tunnelMessage, type AgentMessage__Output, type ServerMessage } from '../../protocol/agent-wire.js';
import type { TunnelFrame } from '../../gen/gantry/agent/v1/TunnelFrame.js';
import { decodeAgentMessage, type AgentStreamMessage, type HeartbeatMessage, type HelloMessage, type ResultMessage } from './wire-schema.js';
import { TunnelMux } from '../../gateway/tunnel.js';
import { MAX_QUEUED_TO_AGENT, type AgentGrpcServerOptions, type AgentIdent, type AgentLink, type AgentStreamInput, type Conn, type EndReason } from './conn.js';

export class AgentStreams {
  private conns = new Set<Conn>();
  private bySession = new Map<string, Conn>();
  private seq = 0;
  readonly window: number;
  private readonly now: () => number;

  constructor(
    private readonly o: AgentGrpcServerOptions,
    private readonly log: Logger,
  ) {
    this.window = clampWindow(o.window, DEFAULT_WINDOW);
    this.now = o.now ?? Date.now;
  }

  /** Live streams on this node. */
  count(): number {
    return this.conns.size;
  }

  /** The live stream of a session (the unary calls check a task against it). */
  bySessionId(sessionId: string): Conn | undefined {
    return this.bySession.get(sessionId);
  }

  /** Ends every stream (non-fatal: the node is stopping). */
  endAll(): void {
    for (const c of [...this.conns]) this.endConn(c, { error: unavailable('server_shutting_down', 'the server is shutting down; reconnect'), fatal: false });
  }

  /** Ends the streams one transport carries (non-fatal: the agents reconnect). */
  endTransport(transport: AgentLink['transport']): void {
    for (const c of [...this.conns]) if (c.link.transport === transport) this.endConn(c, { error: unavailable('server_shutting_down', 'the server is shutting down; reconnect'), fatal: false });
  }

  /** DELETE /agents/{id}: ends the agent's stream (fatal for it) and releases its tasks now. */
  kickAgent(agentId: string, code = 'agent_deleted', message = 'this agent was deleted by a team admin'): void {
    const reason: EndReason = { error: new AppError('not_found', code, message), fatal: true };
    for (const c of this.conns) if (c.agentId === agentId) c.pendingEnd = reason;
    this.o.sessions.revoke(agentId);
    // a stream still in hello (no session yet) ends too
    for (const c of [...this.conns]) if (c.agentId === agentId) this.endConn(c, reason);
  }

  /**
   * After a change to a team's active models or custom nodes (files onRegistryChange): every live
   * stream of the team on this node gets a `sync` hint (the agent fetches the manifest now rather
   * than at its next periodic check). Returns how many streams were told.
   */
  syncHint(teamId: string): number {
    let n = 0;
    for (const c of this.conns) if (c.teamId === teamId && c.sessionId && !c.closed && this.send(c, { sync: {} })) n++;
    return n;
  }

  /** Hook for identity.onCredentialsRevoked: streams authenticated with these credentials end now. */
  credentialsRevoked(ids: readonly string[]): void {
    const set = new Set(ids);
    for (const c of [...this.conns]) if (set.has(c.credentialId)) this.revokeConn(c);
  }

  private revokeConn(c: Conn): void {
    const reason: EndReason = { error: unauthorized('credential_revoked', 'this agent credential has been revoked'), fatal: true };
    if (c.agentId && c.sessionId) {
      c.pendingEnd = reason;
      this.o.sessions.revoke(c.agentId);
    }
    this.endConn(c, reason);
  }

  /**
   * Opens a stream on an authenticated link (the ak- was verified by the transport: gRPC metadata
   * or the WebSocket handshake); the first message must be hello. The transport feeds the returned
   * input; everything else (session, window, credit, tunnels) is the same for every transport.
   */
  attachStream(ident: AgentIdent, token: string, link: AgentLink): AgentStreamInput {
    const now = this.now();
    const conn: Conn = {
      seq: ++this.seq,
      link,
      token,
      credentialId: ident.credentialId,
      teamId: ident.teamId,
      peer: link.peer,
      agentId: null,
      sessionId: null,
      machineId: null,
      info: null,
      gate: null,
      queue: [],
      credit: new CreditReturner(this.window, (grant) => this.write(conn, { credit: { grant } })),
      inflight: 0,
      chain: Promise.resolve(),
      openedAt: now,
      lastSeenAt: now,
      lastVerifiedAt: now,
      closed: false,
      pendingEnd: null,
      tunnels: null,
    };
    this.conns.add(conn);
    return {
      data: (m) => this.onData(conn, m),
      halfClosed: () => this.endConn(conn, null),
      gone: () => this.dropConn(conn),
    };
  }

  private onData(c: Conn, raw: AgentMessage__Output): void {
    if (c.closed) return;
    c.lastSeenAt = this.now();
    // tunnel frames are outside the message window (each tunnel stream has its own byte window)
    // and are not ordered with task messages: straight to their stream
    if (raw.msg === 'tunnel') {
      if (raw.tunnel) c.tunnels?.onFrame(raw.tunnel);
      return;
    }
    if (raw.msg === 'tunnels') {
      for (const f of raw.tunnels?.frames ?? []) c.tunnels?.onFrame(f);
      return;
    }
    // every message is decoded by the one schema (wire-schema.ts) before anything looks at it
    const d = decodeAgentMessage(raw);
    if (d.ok && d.msg.msg === 'credit') {
      c.gate?.grant(d.msg.credit.grant);
      this.flushQueue(c);
      return;
    }
    const windowed = raw.msg !== 'hello' && raw.msg !== 'credit';
    if (windowed) {
      c.inflight++;
      if (c.inflight > this.window) {
        this.endConn(c, { error: new AppError('rate_limited', 'window_exceeded', `more than ${this.window} messages in flight without credit`), fatal: false });
        return;
      }
    }
    // a message that does not decode ends the stream in order, after what arrived before it
    c.chain = c.chain
      .then(() => {
        if (c.closed) return undefined;
        if (!d.ok) throw d.error;
        return this.handle(c, d.msg);
      })
      .catch((e: unknown) => {
        // the database away for a moment (a restart, a failover) ends no live session: a heartbeat or
        // inventory not recorded is sent again, task reports go through the actors (which retry);
        // only a hello that cannot register the agent ends its stream (the agent reconnects)
        if (c.agentId && isAppError(e) && e.code === 'database_unavailable') {
          this.log.debug({ agent_id: c.agentId, msg: d.ok ? d.msg.msg : 'undecodable' }, 'agent message not recorded: database unavailable; stream kept');
          return;
        }
        const g = toGrpcError(e);
        if (g.unexpected) this.log.error({ err: e, agent_id: c.agentId }, 'agent message handling failed');
        this.endConn(c, { error: isAppError(e) ? e : new AppError('internal', 'internal_error', 'internal error'), fatal: isAppError(e) && e.kind === 'unauthorized' });
      })
      .finally(() => {
        if (windowed) {
          c.inflight--;
          c.credit.processed();
        }
      });
  }

  private async handle(c: Conn, m: AgentStreamMessage): Promise<void> {
    if (m.msg === 'hello') {
      if (c.agentId) throw invalidParameter('hello: already received on this stream');
      return this.onHello(c, m.hello);
    }
    if (!c.agentId || !c.sessionId) throw invalidParameter('the first message on the stream must be hello');
    const agentId = c.agentId;
    const sessionId = c.sessionId;
    switch (m.msg) {
      case 'heartbeat':
        await this.onHeartbeat(c, m.heartbeat);
        return;
      case 'ack':
        this.o.sessions.fromAgent(agentId, sessionId, m.ack);
        return;
      case 'provisioned':
        this.o.sessions.fromAgent(agentId, sessionId, m.provisioned);
        return;
      case 'progress':
        this.o.sessions.fromAgent(agentId, sessionId, m.progress);
        return;
      case 'result': {
        const r = m.result;
        const t = { taskId: r.task_id, attempt: r.attempt, epoch: r.epoch };
        const out = this.outputOf(c.teamId, t.taskId, r);
        if (typeof out === 'string') this.o.sessions.fromAgent(agentId, sessionId, { type: 'failed', ...t, error: out, ...(r.traceparent ? { traceparent: r.traceparent } : {}) });
        else this.o.sessions.fromAgent(agentId, sessionId, { type: 'finished', ...t, output: out, ...(r.traceparent ? { traceparent: r.traceparent } : {}) });
        return;
      }
      case 'failure':
        this.o.sessions.fromAgent(agentId, sessionId, m.failure);
        return;
      case 'inventory': {
        const { models, custom_nodes: nodes, node_classes: classes } = m.inventory;
        await this.o.agents.updateInventory(agentId, models, nodes, classes);
        if (c.info) {
          const needsSync = await this.needsSync(c.teamId, models, nodes);
          c.info = { ...this.currentInfo(c), models, needsSync };
          this.o.sessions.update(agentId, sessionId, c.info);
        }
        return;
      }
      case 'status': {
        if (c.info) {
          c.info = { ...this.currentInfo(c), draining: m.status.draining };
          this.o.sessions.update(agentId, sessionId, c.info);
        }
        return;
      }
      case 'container':
        this.o.containers?.report(agentId, m.container);
        return;
      case 'credit': // handled on arrival (onData)
      case undefined: // no member we know (a newer agent): ignored, still credited
        return;
    }
  }

  /** Placement: what an agent's executor runs ([] = any: simulate, or an executor this server does not know). */
  private async onHello(c: Conn, h: HelloMessage): Promise<void> {
    const machineId = h.machine_id;
    const { labels, gpus, models, custom_nodes: customNodes, slots } = h;
    const max = this.o.maxAgentsPerTeam;
    if (max > 0 && (await this.o.agents.count(c.teamId)) >= max) {
      const existing = await this.o.agents.list(c.teamId, Math.max(max, 1) + 1000, 0);
      if (!existing.rows.some((r) => r.machineId === machineId))
        throw new AppError('rate_limited', 'agent_quota_exceeded', `this team already has ${existing.total} agent(s), the maximum is ${max} (GANTRY_MAX_AGENTS); delete an agent or raise the quota`);
    }
    const row = await this.o.agents.register({
      teamId: c.teamId,
      machineId,
      displayName: h.display_name.trim() || machineId,
      labels,
      gpus,
      models,
      customNodes,
      slots,
      agentVersion: h.agent_version || 'unknown',
      credentialId: c.credentialId,
      nodeId: this.o.nodeId(),
      toolTypes: toolTypesOf(h.tool_types, h.executor),
      nodeClasses: h.node_classes,
    });
    // before the session opens: the first AgentInfo the scheduler sees already says whether a task
    // sent to this agent must provision first
    const needsSync = await this.needsSync(c.teamId, models, customNodes);
    if (c.closed) return;
    const info: AgentInfo = { ...agentInfoOf(row), draining: h.draining, needsSync, loaded: h.loaded_models };
    c.agentId = row.id;
    c.machineId = machineId;
    c.info = info;
    c.gate = new CreditGate(clampWindow(h.window));
    const running = h.running;
    const sessionId = this.o.sessions.open(
      row.id,
      info,
      (msg) => this.deliver(c, msg),
      (reason) => this.endConn(c, c.pendingEnd ?? this.reasonOf(reason)),
      running,
      // gateway tunnels (this node's and other nodes' forwarded ones) reach the stream through the sessions' table
      (open, h) => (c.closed || !c.tunnels ? null : c.tunnels.open(open, h)),
    );
    c.sessionId = sessionId;
    this.bySession.set(sessionId, c);
    const batch = new TunnelBatcher<TunnelFrame>((frames) => this.write(c, tunnelMessage(frames)));
    c.tunnels = new TunnelMux((f) => {
      if (c.closed) return false;
      batch.push(f);
      return true;
    });
    if (this.o.containers) await this.o.containers.hello(row.id, c.teamId, h.container_runtime, h.tunnel, h.containers);
    // welcome is outside the window
    this.write(c, {
      welcome: { agent_id: row.id, session_id: sessionId, heartbeat_interval_s: this.o.heartbeatIntervalS, window: this.window, team_id: c.teamId, server_version: this.o.serverVersion ?? PROTOCOL_VERSION },
    });
    this.log.info({ agent_id: row.id, machine_id: machineId, session_id: sessionId, peer: c.peer, transport: c.link.transport, running: running.length, slots }, 'agent connected');
  }

  /** needsSync for an inventory; true when the check fails (a needless sync is harmless, a skipped one is not). */
  private async needsSync(teamId: string, models: string[], customNodes: string[]): Promise<boolean> {
    if (!this.o.needsSync) return false;
    try {
      return await this.o.needsSync(teamId, { models, customNodes });
    } catch (e) {
      this.log.warn({ err: e, team_id: teamId }, 'needsSync check failed; assuming the agent must sync');
      return true;
    }
  }

  /** The session's current AgentInfo (its needsSync may have been recomputed since c.info was set). */
  private currentInfo(c: Conn): AgentInfo {
    const s = c.agentId ? this.o.sessions.session(c.agentId) : null;
    return s && s.sessionId === c.sessionId ? s.info : (c.info as AgentInfo);
  }

  private reasonOf(reason: string): EndReason {
    if (reason.startsWith('replaced')) return { error: conflict('session_replaced', 'another connection with the same machine_id took over this agent'), fatal: true };
    return { error: forbidden('session_revoked', reason), fatal: true };
  }

  private async onHeartbeat(c: Conn, hb: HeartbeatMessage): Promise<void> {
    const agentId = c.agentId as string;
    const now = this.now();
    // revocation/expiry take effect on the next heartbeat even without the revoke hook (other nodes)
    if (now - c.lastVerifiedAt >= this.o.heartbeatIntervalS * 1000 - 50) {
      c.lastVerifiedAt = now;
      try {
        await this.o.verifyCredential(c.token);
      } catch (e) {
        if (isAppError(e) && e.kind === 'unauthorized') {
          this.revokeConn(c);
          return;
        }
        throw e;
      }
    }
    // what its runtime holds loaded changed: the scheduler's view follows (warm placement)
    const { loaded_models: loaded, ...stats } = hb;
    if (c.info && c.sessionId) {
      const cur = this.currentInfo(c);
      if ((cur.loaded ?? []).join('\n') !== loaded.join('\n')) {
        c.info = { ...cur, loaded };
        this.o.sessions.update(agentId, c.sessionId, c.info);
      }
    }
    // the schema already bounded and normalised every field
    await this.o.agents.heartbeat(agentId, { ...stats, reported_at: new Date(now).toISOString() });
  }

  /** The task output the actors store, or an error string when the agent reported keys it may not use. */
  private outputOf(teamId: string, taskId: string, r: ResultMessage): Record<string, unknown> | string {
    const prefix = outputPrefix(teamId, taskId);
    const outputs = r.outputs;
    const keys = [...new Set([r.storage_key, ...r.storage_keys, ...outputs.map((o) => o.storage_key)].filter(Boolean))];
    if (keys.some((k) => !k.startsWith(prefix))) return `the agent reported outputs outside this task's storage prefix (${prefix})`;
    const primary = r.storage_key || outputs[0]?.storage_key || '';
    const storageKeys = r.storage_keys.length ? r.storage_keys : outputs.map((o) => o.storage_key);
    return {
      ...r.extra_json,
      ...(primary ? { storage_key: primary } : {}),
      storage_keys: storageKeys,
      image_count: r.image_count,
      outputs,
    };
  }

  // ---------------------------------------------------------------------------------------------
  // server -> agent

  private deliver(c: Conn, msg: ServerToAgent): boolean {
    if (c.closed || !c.gate) return false;
    if (c.held) {
      c.held.push(msg);
      return true;
    }
    const lookup = this.o.partnerKey;
    if (msg.type === 'assign' && msg.assignment.toolType === 'comfyui' && lookup) {
      // the team's Comfy API key for partner nodes (only when the team turned it on; only ComfyUI
      // runs have partner nodes), read for this message only; like a queued send, the assignment
      // counts as delivered now
      c.held = [];
      void lookup(c.teamId)
        .catch((e: unknown) => {
          this.log.warn({ team_id: c.teamId, task_id: msg.taskId, err_message: e instanceof Error ? e.message : String(e) }, 'partner-node key lookup failed: assignment sent without it');
          return null;
        })
        .then((key) => {
          const rest = c.held ?? [];
          c.held = null;
          if (!c.closed && c.gate) this.send(c, encodeServerCommand(msg, key ?? ''));
          for (const m of rest) this.deliver(c, m);
        });
      return true;
    }
    return this.send(c, encodeServerCommand(msg, ''));
  }

  /** A window-consuming message: written now when credit allows, else queued. */
  private send(c: Conn, out: ServerMessage): boolean {
    if (c.closed || !c.gate) return false;
    if (c.queue.length === 0 && c.gate.take()) return this.write(c, out);
    if (c.queue.length >= MAX_QUEUED_TO_AGENT) {
      this.endConn(c, { error: new AppError('rate_limited', 'agent_not_reading', 'the agent stopped returning credit'), fatal: false });
      return false;
    }
    c.queue.push(out);
    return true;
  }

  private flushQueue(c: Conn): void {
    while (!c.closed && c.gate && c.queue.length > 0 && c.gate.take()) this.write(c, c.queue.shift() as ServerMessage);
  }

  private write(c: Conn, m: ServerMessage): boolean {
    if (c.closed) return false;
    try {
      return c.link.write(m);
    } catch {
      return false;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // lifecycle

  /** Ends the stream (reason null = the agent half-closed: a clean OK end). */
  private endConn(c: Conn, reason: EndReason | null): void {
    if (c.closed) return;
    const g = reason ? toGrpcError(reason.error) : null;
    // credit owed for what was processed goes out before the end (whether a transport delivers the
    // batched grant before it must not depend on how the agent's messages were split into reads)
    c.credit.flush();
    if (reason && g) {
      this.write(c, { error: { code: g.errorCode, message: g.details, fatal: reason.fatal } });
      this.log.info({ agent_id: c.agentId, session_id: c.sessionId, code: g.errorCode }, 'agent stream ended by the server');
    }
    this.dropConn(c);
    try {
      c.link.end(g ? { code: g.code, details: g.details } : null);
    } catch {
      /* the call is already gone */
    }
  }

  /** Forgets the stream; its session is closed (the agent actor starts the grace period). */
  private dropConn(c: Conn): void {
    if (!c.closed) {
      c.closed = true;
      c.credit.close();
      c.queue.length = 0;
    }
    if (!this.conns.delete(c)) return;
    c.tunnels?.closeAll('agent_disconnected', 'the agent stream ended');
    if (c.sessionId) this.bySession.delete(c.sessionId);
    if (c.agentId && c.sessionId) this.o.containers?.closed(c.agentId);
    if (c.agentId && c.sessionId) {
      this.o.sessions.close(c.agentId, c.sessionId);
      this.log.info({ agent_id: c.agentId, session_id: c.sessionId }, 'agent disconnected');
    }
  }

  sweep(): void {
    const now = this.now();
    const dead = this.o.heartbeatIntervalS * 3 * 1000;
    const helloTimeout = this.o.helloTimeoutMs ?? 10_000;
    for (const c of [...this.conns]) {
      if (!c.agentId && now - c.openedAt > helloTimeout)
        this.endConn(c, { error: deadlineExceeded('hello_timeout', `no hello within ${helloTimeout} ms`), fatal: false });
      else if (c.agentId && now - c.lastSeenAt > dead)
        this.endConn(c, { error: unavailable('heartbeat_missed', `no message for ${Math.round((now - c.lastSeenAt) / 1000)} s (3 heartbeat intervals)`), fatal: false });
    }
  }
}

/** Tool types of an agent: as its hello says, else derived from its executor (simulate or unknown: any). */
function toolTypesOf(advertised: string[], executor: string): string[] {
  if (advertised.length > 0) return advertised;
  return executor === 'comfyui' || executor === 'nerfstudio' ? [executor] : [];
}
