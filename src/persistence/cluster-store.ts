import type { Database } from './db.js';
import { q } from './sql.js';

/**
 * The cluster's PostgreSQL fence (table cluster_members): a member's row is written when it joins;
 * fencing a member (declared dead, or left) makes every later task/agent write of that member match
 * nothing (task-store and agent-store add `exists (member row, not fenced)` to their statements).
 */
export class ClusterMemberStore {
  constructor(private readonly db: Database) {}

  async register(m: { memberId: string; nodeId: string; address: string }): Promise<void> {
    await q(this.db)(`insert into cluster_members (member_id, node_id, address) values (?, ?, ?) on conflict (member_id) do nothing`, [m.memberId, m.nodeId, m.address]);
  }

  /** Fences the member (idempotent) and marks the agents whose stream it held offline. */
  async fence(memberId: string): Promise<void> {
    await q(this.db)(`update cluster_members set fenced_at = coalesce(fenced_at, now()) where member_id = ?`, [memberId]);
    await q(this.db)(`update agents set agent_status = 'offline' where node_id = ? and agent_status <> 'offline'`, [memberId]);
  }

  /** The agents registered under this node's old member id (their streams are still here) move to its new one. */
  async rehome(oldMemberId: string, newMemberId: string): Promise<void> {
    await q(this.db)(`update agents set node_id = ? where node_id = ?`, [newMemberId, oldMemberId]);
  }

  async isFenced(memberId: string): Promise<boolean> {
    const rows = await q(this.db)<{ f: boolean }>(`select fenced_at is not null as f from cluster_members where member_id = ?`, [memberId]);
    return rows[0] ? Boolean(rows[0].f) : true;
  }

  /**
   * Members missing from the live view (they died while no node was there to declare them dead, or
   * Redis lost its data) are fenced once they are older than `minAgeMs` (a joining member writes
   * its row before it appears in the view); returns the ids fenced now.
   */
  async fenceAbsent(live: readonly string[], minAgeMs: number): Promise<string[]> {
    const rows = await q(this.db)<{ member_id: string }>(
      `update cluster_members set fenced_at = now()
       where fenced_at is null and joined_at < now() - (? * interval '1 millisecond') and member_id not in (select jsonb_array_elements_text(?::jsonb))
       returning member_id`,
      [minAgeMs, JSON.stringify(live)],
    );
    const ids = rows.map((r) => r.member_id);
    if (ids.length > 0) await q(this.db)(`update agents set agent_status = 'offline' where node_id in (select jsonb_array_elements_text(?::jsonb)) and agent_status <> 'offline'`, [JSON.stringify(ids)]);
    return ids;
  }

  /** Fenced rows older than a day are history. */
  async prune(): Promise<void> {
    await q(this.db)(`delete from cluster_members where fenced_at < now() - interval '1 day'`);
  }
}
