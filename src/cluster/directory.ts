/**
 * The agent directory: which cluster member holds each agent's gRPC stream (agent actors live where
 * their stream is). Entries carry an epoch from one cluster-wide counter, so a late message about an
 * older connection never overrides a newer one. Every node keeps a replica in memory (lookups are
 * synchronous: the router calls lookup() per message), fed by pub/sub and fully re-read whenever the
 * subscription (re)connects. Ownership by the directory only saves hops: a message that reaches a
 * node without the stream finds no session there, and the task's fenced writes decide.
 */
import { z } from 'zod';
import type { Logger } from '../shared/logger.js';
import type { Redis, RedisConnection } from './redis.js';

export interface DirectoryEntry {
  memberId: string;
  epoch: number;
}

export interface AgentDirectoryPort {
  /** This member now holds the agent's stream; resolves with the entry's epoch. */
  claim(agentId: string): Promise<number>;
  /** The stream closed here: the entry goes unless another member claimed it since. */
  release(agentId: string): Promise<void>;
  /** Re-asserts entries of streams this member holds (after Redis lost its data); missing ones are claimed again. */
  reassert(agentIds: readonly string[]): Promise<void>;
  /** Which member holds the agent's stream, as this node knows it. */
  lookup(agentId: string): DirectoryEntry | null;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The table in-memory directories share (one process: a single node, or the contract tests' nodes). */
export class InMemoryDirectoryTable {
  readonly entries = new Map<string, DirectoryEntry>();
  epoch = 0;
}

/** In memory: a single node (every stream is here), or several instances over one shared table. */
export class InMemoryAgentDirectory implements AgentDirectoryPort {
  private readonly entries: Map<string, DirectoryEntry>;
  constructor(
    private readonly memberId: string,
    private readonly table = new InMemoryDirectoryTable(),
  ) {
    this.entries = table.entries;
  }
  async claim(agentId: string): Promise<number> {
    const e = { memberId: this.memberId, epoch: ++this.table.epoch };
    this.entries.set(agentId, e);
    return e.epoch;
  }
  async release(agentId: string): Promise<void> {
    if (this.entries.get(agentId)?.memberId === this.memberId) this.entries.delete(agentId);
  }
  async reassert(agentIds: readonly string[]): Promise<void> {
    for (const id of agentIds) if (!this.entries.has(id)) await this.claim(id);
  }
  lookup(agentId: string): DirectoryEntry | null {
    return this.entries.get(agentId) ?? null;
  }
  async start(): Promise<void> {}
  async stop(): Promise<void> {}
}

const Change = z.object({ a: z.string().min(1).max(64), m: z.string().max(300), e: z.number().int().nonnegative() });

// KEYS[1] directory hash, KEYS[2] epoch counter, KEYS[3] channel; ARGV agentId, memberId
const CLAIM = `local e = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. e)
redis.call('PUBLISH', KEYS[3], cjson.encode({a = ARGV[1], m = ARGV[2], e = e}))
return e`;
// release only our own entry
const RELEASE = `local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local sep = string.find(v, '|', 1, true)
if string.sub(v, 1, sep - 1) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', KEYS[3], cjson.encode({a = ARGV[1], m = '', e = tonumber(string.sub(v, sep + 1))}))
return 1`;
// claim only when missing (Redis lost its data) or already ours
const REASSERT = `local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then return 0 end
local e = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. e)
redis.call('PUBLISH', KEYS[3], cjson.encode({a = ARGV[1], m = ARGV[2], e = e}))
return e`;

export class RedisAgentDirectory implements AgentDirectoryPort {
  private readonly entries = new Map<string, DirectoryEntry>();
  private sub: Redis | null = null;
  private readonly keys: [string, string, string];
  private stopped = false;

  constructor(
    private readonly conn: RedisConnection,
    private readonly memberId: () => string,
    private readonly logger: Logger,
  ) {
    const p = conn.prefix;
    this.keys = [`${p}agent-dir`, `${p}agent-dir:epoch`, `${p}agent-dir:changes`];
  }

  async start(): Promise<void> {
    const sub = await this.conn.subscriber();
    this.sub = sub;
    await sub.subscribe(this.keys[2], (raw: string) => this.onChange(raw));
    // a (re)connected subscription may have missed changes: read the whole directory again
    sub.on('ready', () => void this.fullSync());
    await this.fullSync();
  }

  private onChange(raw: string): void {
    let c: z.infer<typeof Change>;
    try {
      c = Change.parse(JSON.parse(raw));
    } catch {
      return;
    }
    const cur = this.entries.get(c.a);
    if (cur && cur.epoch > c.e) return;
    if (c.m === '') {
      if (cur && cur.epoch === c.e) this.entries.delete(c.a);
    } else this.entries.set(c.a, { memberId: c.m, epoch: c.e });
  }

  private async fullSync(): Promise<void> {
    if (this.stopped) return;
    try {
      const all = await this.conn.client.hGetAll(this.keys[0]);
      this.entries.clear();
      for (const [agentId, v] of Object.entries(all)) {
        const i = v.lastIndexOf('|');
        if (i > 0) this.entries.set(agentId, { memberId: v.slice(0, i), epoch: Number(v.slice(i + 1)) });
      }
    } catch (e) {
      this.logger.warn({ err_message: (e as Error).message }, 'agent directory: full read failed (kept the last replica)');
    }
  }

  async claim(agentId: string): Promise<number> {
    const me = this.memberId();
    const e = Number(await this.conn.client.eval(CLAIM, { keys: this.keys, arguments: [agentId, me] }));
    const cur = this.entries.get(agentId);
    if (!cur || cur.epoch < e) this.entries.set(agentId, { memberId: me, epoch: e });
    return e;
  }

  async release(agentId: string): Promise<void> {
    await this.conn.client.eval(RELEASE, { keys: this.keys, arguments: [agentId, this.memberId()] });
  }

  async reassert(agentIds: readonly string[]): Promise<void> {
    const me = this.memberId();
    await Promise.all(agentIds.map((id) => this.conn.client.eval(REASSERT, { keys: this.keys, arguments: [id, me] })));
    // entries naming an older incarnation of this member are re-claimed under the new id
    const stale = agentIds.filter((id) => this.entries.get(id)?.memberId !== me);
    await Promise.all(stale.map((id) => this.claim(id)));
  }

  lookup(agentId: string): DirectoryEntry | null {
    return this.entries.get(agentId) ?? null;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    const s = this.sub;
    this.sub = null;
    await s?.close().catch(() => undefined);
  }
}
