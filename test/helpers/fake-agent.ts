import { randomUUID } from 'node:crypto';
import type { GantryNode } from '../../src/main.js';
import type { ServerToAgent } from '../../src/actors/ports.js';
import type { AgentReport } from '../../src/edge/agents/wire-schema.js';
import { agentInfoOf } from '../../src/persistence/agent-store.js';
import { SCHEDULER } from '../../src/actors/index.js';

export interface FakeAgentOptions {
  teamId: string;
  machineId?: string;
  labels?: string[];
  gpus?: Array<{ name: string; vram_gb: number }>;
  models?: string[];
  slots?: number;
}

type Assign = Extract<ServerToAgent, { type: 'assign' }>;

/**
 * An agent at the transport port (what the gRPC stream server feeds): registers an agent record,
 * opens a session, records what the server sends, and says ack/progress/finish/fail on demand.
 */
export class FakeAgent {
  agentId = '';
  sessionId = '';
  inbox: ServerToAgent[] = [];
  ended: string | null = null;
  private waiters: Array<{ pred: (m: ServerToAgent) => boolean; resolve: (m: ServerToAgent) => void }> = [];
  readonly machineId: string;

  constructor(
    private readonly node: GantryNode,
    readonly o: FakeAgentOptions,
  ) {
    this.machineId = o.machineId ?? `fake-${randomUUID()}`;
  }

  async connect(running: Array<{ taskId: string; attempt: number; epoch: number }> = []): Promise<this> {
    const row = await this.node.agentStore.register({
      teamId: this.o.teamId,
      machineId: this.machineId,
      displayName: this.machineId,
      labels: this.o.labels ?? [],
      gpus: this.o.gpus ?? [{ name: 'NVIDIA RTX 4090', vram_gb: 24 }],
      models: this.o.models ?? [],
      customNodes: [],
      slots: this.o.slots ?? 1,
      agentVersion: 'fake',
      credentialId: null,
      nodeId: 'test',
    });
    this.agentId = row.id;
    this.ended = null;
    this.sessionId = this.node.sessions.open(
      row.id,
      agentInfoOf(row),
      (m) => {
        this.inbox.push(m);
        for (const w of [...this.waiters]) if (w.pred(m)) {
          this.waiters.splice(this.waiters.indexOf(w), 1);
          w.resolve(m);
        }
        return true;
      },
      (reason) => (this.ended = reason),
      running,
    );
    // wait until the scheduler has seen it (a stats ask is processed after agent_up)
    await this.node.actors.ask({ kind: 'agent', id: row.id }, { type: 'get' });
    await this.node.actors.ask({ kind: SCHEDULER, id: this.o.teamId }, { type: 'stats' });
    return this;
  }

  /** Resolves with the first message (already received or future) that matches. */
  next(pred: (m: ServerToAgent) => boolean, timeoutMs = 10_000): Promise<ServerToAgent> {
    const have = this.inbox.find(pred);
    if (have) return Promise.resolve(have);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`fake agent ${this.machineId}: no matching message in ${timeoutMs} ms; inbox: ${JSON.stringify(this.inbox.map((m) => m.type))}`)), timeoutMs);
      this.waiters.push({ pred, resolve: (m) => (clearTimeout(t), resolve(m)) });
    });
  }

  async assignment(taskId?: string): Promise<Assign> {
    return (await this.next((m) => m.type === 'assign' && (taskId === undefined || m.taskId === taskId))) as Assign;
  }

  private say(msg: AgentReport): void {
    this.node.sessions.fromAgent(this.agentId, this.sessionId, msg);
  }

  ack(a: { taskId: string; attempt: number; epoch: number }): void {
    this.say({ type: 'ack', taskId: a.taskId, attempt: a.attempt, epoch: a.epoch });
  }
  progress(a: { taskId: string; attempt: number; epoch: number }, p: Extract<AgentReport, { type: 'progress' }>['progress']): void {
    this.say({ type: 'progress', taskId: a.taskId, attempt: a.attempt, epoch: a.epoch, progress: p });
  }
  finish(a: { taskId: string; attempt: number; epoch: number }, output: Record<string, unknown> = { storage_key: `outputs/${a.taskId}/output.png`, image_count: 1 }): void {
    this.say({ type: 'finished', taskId: a.taskId, attempt: a.attempt, epoch: a.epoch, output });
  }
  fail(a: { taskId: string; attempt: number; epoch: number }, error = 'tool error'): void {
    this.say({ type: 'failed', taskId: a.taskId, attempt: a.attempt, epoch: a.epoch, error });
  }
  /** Closes the stream; resolves once the agent actor has processed it (its grace timer is armed). */
  async disconnect(): Promise<void> {
    this.node.sessions.close(this.agentId, this.sessionId);
    await this.node.actors.ask({ kind: 'agent', id: this.agentId }, { type: 'get' });
  }
}
