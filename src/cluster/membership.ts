/**
 * Cluster membership in Redis, as Orleans' RedisMembershipTable does it: a versioned table of
 * members, every change of the member set made by compare-and-set (Lua scripts that check the
 * version the caller read), and a lease per member renewed by heartbeats.
 *
 * Keys under the prefix: `members` (hash memberId -> JSON {memberId,nodeId,address,startedAt,leaseUntil}),
 * `members:version` (the view version), `members:dead` (hash memberId -> declared-dead time, kept a day),
 * channel `members:changes` (a new version was written).
 *
 * Time is the Redis server's clock (`TIME` inside the scripts), so clock skew between nodes does not
 * matter. A member whose lease lapsed is a suspect (still in the view); one silent for a second lease
 * is declared dead by whichever live node's heartbeat sees it first: the beforeRemoveDead hooks run
 * (the PostgreSQL fence), then a CAS removes it and records it in the dead set. A member that finds
 * itself in the dead set was paused or partitioned: it is evicted (onEvicted) and re-joins as a new
 * member. A member missing without being declared dead (Redis restarted, FLUSHALL) re-registers itself
 * with the same id; versions never go backwards (scripts take the caller's last known version).
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { Logger } from '../shared/logger.js';
import type { Member, MembershipPort, MembershipView } from './ports.js';
import type { Redis, RedisConnection } from './redis.js';

const Entry = z.object({ memberId: z.string(), nodeId: z.string(), address: z.string(), startedAt: z.number(), leaseUntil: z.number() });
type Entry = z.infer<typeof Entry>;

// Redis server time in ms
const NOW = `local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;
// bump the version to max(current, known) + 1 and announce it
const BUMP = `local cur = tonumber(redis.call('GET', KEYS[2]) or '0') local known = tonumber(ARGV[KNOWN]) or 0
local v = math.max(cur, known) + 1 redis.call('SET', KEYS[2], v) redis.call('PUBLISH', KEYS[4], v)`;

// KEYS: members, version, dead, channel. ARGV: memberId, entry JSON (without leaseUntil), leaseMs, knownVersion
const JOIN = `${NOW}
local e = cjson.decode(ARGV[2]) e.leaseUntil = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
${BUMP.replace('KNOWN', '4')}
return v`;

// renew own lease. Returns {status, version, now}: status 1 renewed, 2 re-registered (missing, not dead), 3 declared dead
const HEARTBEAT = `${NOW}
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  local e = cjson.decode(raw) e.leaseUntil = now + tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
  if cur == 0 then
    ${BUMP.replace('KNOWN', '4')}
    return {1, v, now}
  end
  return {1, cur, now}
end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return {3, cur, now} end
local e = cjson.decode(ARGV[2]) e.leaseUntil = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
${BUMP.replace('KNOWN', '4')}
return {2, v, now}`;

// declare dead: only if the version is still the one read (CAS) and the lease still lapsed by a lease
// ARGV: deadId, expectedVersion, leaseMs, knownVersion
const REMOVE_DEAD = `${NOW}
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur ~= tonumber(ARGV[2]) then return 0 end
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local e = cjson.decode(raw)
if e.leaseUntil + tonumber(ARGV[3]) > now then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], now)
redis.call('PEXPIRE', KEYS[3], 86400000)
${BUMP.replace('KNOWN', '4')}
return v`;

// graceful leave. ARGV: memberId, knownVersion
const LEAVE = `if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
${BUMP.replace('KNOWN', '2')}
return v`;

/** What both implementations share: the current view and the listeners of views, evictions and deaths. */
abstract class MembershipListeners {
  protected current: MembershipView = { version: 0, members: [], suspects: [] };
  protected readonly changeFns = new Set<(v: MembershipView) => void>();
  protected readonly evictFns = new Set<(m: Member) => void>();
  protected readonly deadHooks: Array<(m: Member) => Promise<void>> = [];

  view(): MembershipView {
    return this.current;
  }

  onChange(fn: (v: MembershipView) => void): () => void {
    this.changeFns.add(fn);
    return () => this.changeFns.delete(fn);
  }

  onEvicted(fn: (newSelf: Member) => void): () => void {
    this.evictFns.add(fn);
    return () => this.evictFns.delete(fn);
  }

  beforeRemoveDead(fn: (dead: Member) => Promise<void>): void {
    this.deadHooks.push(fn);
  }
}

export interface RedisMembershipOptions {
  leaseMs: number;
  logger: Logger;
}

export class RedisMembership extends MembershipListeners implements MembershipPort {
  private self: Member | null = null;
  private timer: NodeJS.Timeout | null = null;
  private sub: Redis | null = null;
  private stopped = false;
  private beating = false;
  private outage = false;
  private readonly keys: string[];
  private readonly log: Logger;

  constructor(
    private readonly conn: RedisConnection,
    private readonly o: RedisMembershipOptions,
  ) {
    super();
    const p = conn.prefix;
    this.keys = [`${p}members`, `${p}members:version`, `${p}members:dead`, `${p}members:changes`];
    this.log = o.logger.child({ component: 'membership' });
  }

  private entryJson(m: Member): string {
    return JSON.stringify({ memberId: m.memberId, nodeId: m.nodeId, address: m.address, startedAt: m.startedAt });
  }

  async join(self: Member): Promise<MembershipView> {
    this.self = self;
    if (!this.sub) {
      const sub = await this.conn.subscriber();
      this.sub = sub;
      await sub.subscribe(this.keys[3] as string, () => void this.refresh());
      // a re-connected subscription may have missed versions
      sub.on('ready', () => void this.refresh());
    }
    await this.conn.client.eval(JOIN, { keys: this.keys, arguments: [self.memberId, this.entryJson(self), String(this.o.leaseMs), String(this.current.version)] });
    await this.refresh();
    this.arm();
    return this.current;
  }

  private arm(): void {
    if (this.stopped || this.timer) return;
    this.timer = setInterval(() => void this.beat(), Math.max(50, Math.floor(this.o.leaseMs / 3)));
  }

  /** One heartbeat: renew the lease (or learn the eviction / re-register), read a newer view, sweep the dead. */
  private async beat(): Promise<void> {
    if (this.beating || this.stopped || !this.self) return;
    this.beating = true;
    try {
      const self = this.self;
      const r = (await this.conn.client.eval(HEARTBEAT, { keys: this.keys, arguments: [self.memberId, this.entryJson(self), String(this.o.leaseMs), String(this.current.version)] })) as number[];
      if (this.outage) {
        this.outage = false;
        this.log.info('membership: Redis reachable again');
      }
      const [status, version, now] = r.map(Number) as [number, number, number];
      // this member was replaced meanwhile (an eviction while the beat was in flight): the answer is about the old one
      if (this.self !== self) return;
      if (status === 3) {
        this.evictNow('declared dead by the cluster');
        return;
      }
      if (status === 2) this.log.warn({ member: self.memberId }, 'membership: this member was missing from Redis (restart or flush); re-registered');
      if (version !== this.current.version || status === 2) await this.refresh();
      await this.sweep(now);
    } catch (e) {
      if (!this.outage) {
        this.outage = true;
        this.log.warn({ err_message: (e as Error).message }, 'membership: Redis unreachable; keeping the last view');
      }
    } finally {
      this.beating = false;
    }
  }

  /** Declares members dead whose lease lapsed a lease ago (fence hooks first, then a CAS removal). */
  private async sweep(now: number): Promise<void> {
    const table = await this.read();
    for (const e of table.entries) {
      if (e.memberId === this.self?.memberId || e.leaseUntil + this.o.leaseMs > now) continue;
      const dead: Member = { memberId: e.memberId, nodeId: e.nodeId, address: e.address, startedAt: e.startedAt };
      try {
        for (const h of this.deadHooks) await h(dead);
      } catch (err) {
        this.log.warn({ member: e.memberId, err_message: (err as Error).message }, 'membership: a hook refused the removal of a dead member (retried next beat)');
        continue;
      }
      const v = Number(await this.conn.client.eval(REMOVE_DEAD, { keys: this.keys, arguments: [e.memberId, String(table.version), String(this.o.leaseMs), String(this.current.version)] }));
      if (v > 0) {
        this.log.warn({ member: e.memberId, view_version: v }, 'membership: declared a member dead');
        await this.refresh();
        return; // the version moved: the next beat sweeps the rest against the new one
      }
    }
  }

  private async read(): Promise<{ version: number; entries: Entry[]; now: number }> {
    const m = this.conn.client.multi();
    m.get(this.keys[1] as string);
    m.hGetAll(this.keys[0] as string);
    m.time();
    const [ver, all, time] = (await m.exec()) as unknown as [string | null, Record<string, string>, Date | [string, string]];
    const entries: Entry[] = [];
    for (const raw of Object.values(all ?? {})) {
      try {
        entries.push(Entry.parse(JSON.parse(raw)));
      } catch {
        /* a foreign or damaged entry is ignored */
      }
    }
    const now = time instanceof Date ? time.getTime() : Array.isArray(time) ? Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000) : Date.now();
    return { version: Number(ver ?? 0), entries, now };
  }

  /** Reads the table and publishes a view when its version is newer than the last one. */
  private async refresh(): Promise<void> {
    if (this.stopped) return;
    let t: Awaited<ReturnType<RedisMembership['read']>>;
    try {
      t = await this.read();
    } catch {
      return;
    }
    if (t.version <= this.current.version) return;
    const members = t.entries.map((e) => ({ memberId: e.memberId, nodeId: e.nodeId, address: e.address, startedAt: e.startedAt })).sort((a, b) => (a.memberId < b.memberId ? -1 : a.memberId > b.memberId ? 1 : 0));
    const suspects = t.entries.filter((e) => e.leaseUntil < t.now).map((e) => e.memberId);
    this.current = { version: t.version, members, suspects };
    for (const fn of [...this.changeFns]) {
      try {
        fn(this.current);
      } catch (e) {
        this.log.error({ err: e }, 'membership: a view listener failed');
      }
    }
  }

  private evictNow(reason: string): void {
    const old = this.self;
    if (!old) return;
    const fresh: Member = { ...old, memberId: `${old.nodeId}/${randomBytes(4).toString('hex')}`, startedAt: Date.now() };
    this.log.error({ member: old.memberId, new_member: fresh.memberId, reason }, 'membership: this member was evicted; re-joining as a new member');
    this.self = fresh;
    for (const fn of [...this.evictFns]) {
      try {
        fn(fresh);
      } catch (e) {
        this.log.error({ err: e }, 'membership: an eviction listener failed');
      }
    }
    // the old entry goes now (when it is still there: fenced in PostgreSQL before Redis declared it dead)
    void this.conn.client
      .eval(LEAVE, { keys: this.keys, arguments: [old.memberId, String(this.current.version)] })
      .then(() => this.conn.client.eval(JOIN, { keys: this.keys, arguments: [fresh.memberId, this.entryJson(fresh), String(this.o.leaseMs), String(this.current.version)] }))
      .then(() => this.refresh())
      .catch(() => undefined); // the next beat re-registers it
  }

  evict(reason: string): void {
    this.evictNow(reason);
  }

  /** Tests: a paused process (no heartbeats) until resumeHeartbeats(). */
  suspendHeartbeats(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  resumeHeartbeats(): void {
    this.arm();
  }

  async leave(): Promise<void> {
    if (!this.self) return;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.conn.client.eval(LEAVE, { keys: this.keys, arguments: [this.self.memberId, String(this.current.version)] });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    const s = this.sub;
    this.sub = null;
    await s?.close().catch(() => undefined);
  }
}

export function createMembership(conn: RedisConnection, o: RedisMembershipOptions): MembershipPort {
  return new RedisMembership(conn, o);
}

// ---------------------------------------------------------------------------------------------
// In memory: the same semantics over a table shared in one process (the contract suite's nodes)

/** The table in-memory members share (one per simulated cluster). */
export class InMemoryMembershipTable {
  readonly members = new Map<string, { member: Member; leaseUntil: number }>();
  readonly dead = new Set<string>();
  version = 0;
  readonly nodes = new Set<InMemoryMembership>();
  /** Announces a new version to every member (pub/sub). */
  bump(): void {
    this.version += 1;
    for (const n of this.nodes) n.refresh();
  }
}

export class InMemoryMembership extends MembershipListeners implements MembershipPort {
  private self: Member | null = null;
  private timer: NodeJS.Timeout | null = null;
  private beating = false;

  constructor(
    private readonly table: InMemoryMembershipTable,
    private readonly o: { leaseMs: number; now?: () => number },
  ) {
    super();
  }

  private now(): number {
    return (this.o.now ?? Date.now)();
  }

  async join(self: Member): Promise<MembershipView> {
    this.self = self;
    this.table.nodes.add(this);
    this.table.members.set(self.memberId, { member: self, leaseUntil: this.now() + this.o.leaseMs });
    this.table.bump();
    this.resumeHeartbeats();
    return this.current;
  }

  /** Tests: a paused process (no heartbeats) until resumeHeartbeats(). */
  suspendHeartbeats(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  resumeHeartbeats(): void {
    this.timer ??= setInterval(() => void this.beat(), Math.max(20, Math.floor(this.o.leaseMs / 3)));
  }

  private async beat(): Promise<void> {
    const self = this.self;
    if (!self || this.beating) return;
    this.beating = true;
    try {
      const e = this.table.members.get(self.memberId);
      if (e) e.leaseUntil = this.now() + this.o.leaseMs;
      else if (this.table.dead.has(self.memberId)) return this.evict('declared dead by the cluster');
      else {
        this.table.members.set(self.memberId, { member: self, leaseUntil: this.now() + this.o.leaseMs });
        this.table.bump();
      }
      const v = this.table.version;
      for (const d of [...this.table.members.values()]) {
        if (d.member.memberId === self.memberId || d.leaseUntil + this.o.leaseMs > this.now()) continue;
        try {
          for (const h of this.deadHooks) await h(d.member);
        } catch {
          continue;
        }
        // compare-and-set: only when nothing changed meanwhile
        if (this.table.version !== v || !this.table.members.has(d.member.memberId)) return;
        this.table.members.delete(d.member.memberId);
        this.table.dead.add(d.member.memberId);
        this.table.bump();
        return;
      }
    } finally {
      this.beating = false;
    }
  }

  refresh(): void {
    if (this.table.version <= this.current.version) return;
    const now = this.now();
    const entries = [...this.table.members.values()];
    this.current = {
      version: this.table.version,
      members: entries.map((e) => e.member).sort((a, b) => (a.memberId < b.memberId ? -1 : a.memberId > b.memberId ? 1 : 0)),
      suspects: entries.filter((e) => e.leaseUntil < now).map((e) => e.member.memberId),
    };
    for (const fn of [...this.changeFns]) fn(this.current);
  }

  evict(_reason: string): void {
    const old = this.self;
    if (!old) return;
    const fresh: Member = { ...old, memberId: `${old.nodeId}/${randomBytes(4).toString('hex')}`, startedAt: this.now() };
    this.self = fresh;
    for (const fn of [...this.evictFns]) fn(fresh);
    if (this.table.members.delete(old.memberId)) this.table.bump();
    this.table.members.set(fresh.memberId, { member: fresh, leaseUntil: this.now() + this.o.leaseMs });
    this.table.bump();
  }

  async leave(): Promise<void> {
    this.suspendHeartbeats();
    if (this.self && this.table.members.delete(this.self.memberId)) this.table.bump();
  }

  async stop(): Promise<void> {
    this.suspendHeartbeats();
    this.table.nodes.delete(this);
  }
}
