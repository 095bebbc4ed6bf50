/**
 * Which GPU budgets a team has (its own, and which of its credentials have one), cached in memory:
 * most teams have none, and the run gate of their submits then needs no statement at all (the gate
 * was one statement per tick of submits, a round trip before the insert). A team whose budgets do
 * apply to the caller still goes to PostgreSQL, for the month's use.
 *
 * Freshness: a budget write on this node drops the team's entry after its commit (and, in cluster
 * mode, the writer awaits the broadcast that drops it on every other node before it answers); a
 * read that began before a drop is not stored (the epoch). While the node does not hear the
 * cluster's invalidations the cache is bypassed, and it starts empty when the subscription is made
 * again (`state`, as the auth cache); entries also expire after
 * `ttlMs`, a bound should a budget change reach PostgreSQL some other way (a restore).
 */
import { Lru } from '../shared/lru.js';

export interface BudgetSet {
  /** The team's own budget exists. */
  team: boolean;
  /** Credentials of the team with their own budget. */
  credentials: ReadonlySet<string>;
}

export interface BudgetPresenceOptions {
  /** Reads the team's budgets (the credential_id of each row, null for the team's own). */
  read: (teamId: string) => Promise<Array<string | null>>;
  now: () => number;
  ttlMs?: number;
  /**
   * Cluster: whether this node hears the other nodes' budget changes right now, and a generation
   * that grows on every re-subscription (CacheInvalidationPort.state); absent: always healthy.
   */
  state?: () => { healthy: boolean; generation: number };
  /** Most teams held (the least recently used goes beyond it). */
  maxTeams?: number;
}

export class BudgetPresence {
  private readonly teams: Lru<BudgetSet>;
  private readonly reads = new Map<string, Promise<BudgetSet>>();
  private epoch = 0;
  private generation: number | null = null;
  private readonly ttlMs: number;

  constructor(private readonly o: BudgetPresenceOptions) {
    this.ttlMs = o.ttlMs ?? 30_000;
    this.teams = new Lru(o.maxTeams ?? 100_000);
  }

  /** Whether any budget may apply to a run by this credential (null: a user session) of the team. */
  async mayApply(teamId: string, credentialId: string | null): Promise<boolean> {
    const s = await this.get(teamId);
    return s.team || (credentialId !== null && s.credentials.has(credentialId));
  }

  private async get(teamId: string): Promise<BudgetSet> {
    const st = this.o.state?.();
    const healthy = st?.healthy ?? true;
    // re-subscribed: what was published meanwhile was missed
    if (st && st.generation !== this.generation) {
      if (this.generation !== null) this.dropAll();
      this.generation = st.generation;
    }
    const known = healthy ? this.teams.get(teamId, this.o.now(), this.ttlMs) : undefined;
    if (known) return known;
    const running = this.reads.get(teamId);
    if (running) return running;
    const epoch = this.epoch;
    const read = this.o
      .read(teamId)
      .then((rows) => {
        const set: BudgetSet = { team: rows.includes(null), credentials: new Set(rows.filter((r): r is string => r !== null)) };
        // a drop since the read began: what it saw may be older than the change
        if (healthy && epoch === this.epoch) this.teams.set(teamId, set, this.o.now());
        return set;
      })
      .finally(() => {
        if (this.reads.get(teamId) === read) this.reads.delete(teamId);
      });
    this.reads.set(teamId, read);
    return read;
  }

  /** The team's budgets changed (after the commit): its entry goes, and reads in flight are not stored. */
  drop(teamId: string): void {
    this.epoch++;
    this.teams.delete(teamId);
    this.reads.delete(teamId);
  }

  /** Every entry goes (invalidations were missed: the cluster subscription was re-made). */
  dropAll(): void {
    this.epoch++;
    this.teams.clear();
    this.reads.clear();
  }
}
