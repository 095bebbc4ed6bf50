import type { TeamRole } from './principal.js';
import type { PageRequest } from '../shared/pagination.js';
import type { CredentialKind } from './credentials.js';
import type { AuditNote } from '../shared/audit.js';
import { recorderOn } from '../persistence/audit.js';
import { AccountStore, type Q } from './store-accounts.js';

export { AccountStore, type OutboxRow, type Q, type RefreshRow, type SessionAuthRow, type UserAuthRow, type UserRow } from './store-accounts.js';

export interface TeamRow {
  id: string;
  display_name: string;
  owner_id: string;
  is_personal: boolean;
  created_at: Date;
  updated_at: Date;
}

export interface CredentialAuthRow {
  id: string;
  credential_type: CredentialKind;
  team_id: string;
  user_id: string | null;
  display_name: string;
  linked_to: string | null;
  expires_at: Date | null;
  revoked_at: Date | null;
  team_deleted: boolean;
  /** For device credentials: the user's current role in the credential's team (null: not a member). */
  member_role: TeamRole | null;
}

export interface PairingRow {
  id: string;
  user_code: string;
  poll_secret_hash: string;
  device_name: string;
  /** Whether the confirmed pairing also mints an agent credential (ak-); false for a CLI. */
  mint_agent: boolean;
  pairing_status: 'pending' | 'confirmed' | 'delivered';
  user_id: string | null;
  team_id: string | null;
  expires_at: Date;
  last_polled_at: Date | null;
}

/**
 * All identity SQL (the accounts part in AccountStore, store-accounts.ts). Every team-scoped
 * statement takes the team id in its WHERE clause, so a resource of another team is simply not
 * found (the service turns that into a 404).
 */
export class IdentityStore extends AccountStore {
  // ---- teams and members ---------------------------------------------------------------------

  async insertTeam(q: Q, t: { id: string; displayName: string; ownerId: string; isPersonal: boolean; now: Date }): Promise<void> {
    await q(`insert into teams (id, display_name, owner_id, is_personal, created_at, updated_at) values (?, ?, ?, ?, ?, ?)`, [t.id, t.displayName, t.ownerId, t.isPersonal, t.now, t.now]);
    await q(`insert into team_members (team_id, user_id, member_role, created_at) values (?, ?, 'owner', ?)`, [t.id, t.ownerId, t.now]);
  }

  async countTeams(q: Q = this.q): Promise<number> {
    return (await q<{ n: number }>(`select count(*)::int as n from teams where deleted_at is null`))[0]?.n ?? 0;
  }

  async countOwnedTeams(userId: string, q: Q = this.q): Promise<number> {
    return (await q<{ n: number }>(`select count(*)::int as n from teams where owner_id = ? and deleted_at is null`, [userId]))[0]?.n ?? 0;
  }

  async teamsOfUser(userId: string, page?: PageRequest): Promise<{ rows: Array<TeamRow & { member_role: TeamRole }>; total: number }> {
    const base = `from teams t join team_members m on m.team_id = t.id where m.user_id = ? and t.deleted_at is null`;
    const limit = page ? ` limit ${page.perPage} offset ${page.offset}` : '';
    const rows = await this.q<TeamRow & { member_role: TeamRole }>(`select t.*, m.member_role ${base} order by t.created_at, t.id${limit}`, [userId]);
    const total = page ? ((await this.q<{ n: number }>(`select count(*)::int as n ${base}`, [userId]))[0]?.n ?? 0) : rows.length;
    return { rows, total };
  }

  async team(teamId: string): Promise<(TeamRow & { member_count: number }) | null> {
    const r = await this.q<TeamRow & { member_count: number }>(
      `select t.*, (select count(*)::int from team_members m where m.team_id = t.id) as member_count from teams t where t.id = ? and t.deleted_at is null`,
      [teamId],
    );
    return r[0] ?? null;
  }

  async updateTeam(teamId: string, displayName: string, now: Date, audit?: AuditNote): Promise<boolean> {
    return this.tx(async (q) => {
      const ok = (await q(`update teams set display_name = ?, updated_at = ? where id = ? and deleted_at is null returning id`, [displayName, now, teamId])).length === 1;
      if (ok) await recorderOn(q, audit)();
      return ok;
    });
  }

  /**
   * Soft delete: the team row stays (other modules keep their rows), members, invitations and
   * credentials go. Returns the ids of the credentials revoked, or null when the team was not found.
   */
  async deleteTeam(teamId: string, now: Date, audit?: AuditNote): Promise<string[] | null> {
    return this.tx(async (q) => {
      const r = await q(`update teams set deleted_at = ?, updated_at = ? where id = ? and deleted_at is null returning id`, [now, now, teamId]);
      if (r.length === 0) return null;
      await recorderOn(q, audit)();
      await q(`delete from team_members where team_id = ?`, [teamId]);
      await q(`update invitations set invitation_status = 'revoked' where team_id = ? and invitation_status = 'pending'`, [teamId]);
      const revoked = await q<{ id: string }>(`update credentials set revoked_at = ? where team_id = ? and revoked_at is null returning id`, [now, teamId]);
      return revoked.map((x) => x.id);
    });
  }

  async memberRole(teamId: string, userId: string, q: Q = this.q): Promise<TeamRole | null> {
    const r = await q<{ member_role: TeamRole }>(
      `select m.member_role from team_members m join teams t on t.id = m.team_id and t.deleted_at is null where m.team_id = ? and m.user_id = ?`,
      [teamId, userId],
    );
    return r[0]?.member_role ?? null;
  }

  async members(teamId: string, page: PageRequest): Promise<{ rows: Array<{ user_id: string; display_name: string; email_address: string; member_role: TeamRole; created_at: Date }>; total: number }> {
    const rows = await this.q<{ user_id: string; display_name: string; email_address: string; member_role: TeamRole; created_at: Date }>(
      `select m.user_id, u.display_name, u.email_address, m.member_role, m.created_at
         from team_members m join users u on u.id = m.user_id
        where m.team_id = ? order by m.created_at, m.user_id limit ${page.perPage} offset ${page.offset}`,
      [teamId],
    );
    const total = (await this.q<{ n: number }>(`select count(*)::int as n from team_members where team_id = ?`, [teamId]))[0]?.n ?? 0;
    return { rows, total };
  }

  async addMember(q: Q, teamId: string, userId: string, role: TeamRole, now: Date): Promise<boolean> {
    const r = await q(`insert into team_members (team_id, user_id, member_role, created_at) values (?, ?, ?, ?) on conflict do nothing returning user_id`, [teamId, userId, role, now]);
    return r.length === 1;
  }

  /** Changes a non-owner's role; false when the user is not a (non-owner) member of this team. */
  async setMemberRole(teamId: string, userId: string, role: 'admin' | 'member', audit?: AuditNote): Promise<boolean> {
    return this.tx(async (q) => {
      const ok = (await q(`update team_members set member_role = ? where team_id = ? and user_id = ? and member_role <> 'owner' returning user_id`, [role, teamId, userId])).length === 1;
      if (ok) await recorderOn(q, audit)();
      return ok;
    });
  }

  async removeMember(teamId: string, userId: string, audit?: AuditNote): Promise<boolean> {
    return this.tx(async (q) => {
      const ok = (await q(`delete from team_members where team_id = ? and user_id = ? and member_role <> 'owner' returning user_id`, [teamId, userId])).length === 1;
      if (ok) await recorderOn(q, audit)();
      return ok;
    });
  }

  /** Owner -> admin, member -> owner, in one transaction; false when fromUser is not the owner or toUser not a member. */
  async transferOwnership(teamId: string, fromUser: string, toUser: string, now: Date, maxOwned: number, audit?: AuditNote): Promise<'ok' | 'not_owner' | 'not_member' | 'quota'> {
    return this.tx(async (q) => {
      await this.lock(q, `owned:${toUser}`);
      const rows = await q<{ user_id: string; member_role: TeamRole }>(`select user_id, member_role from team_members where team_id = ? and user_id in (?, ?) for update`, [teamId, fromUser, toUser]);
      if (rows.find((r) => r.user_id === fromUser)?.member_role !== 'owner') return 'not_owner';
      if (!rows.find((r) => r.user_id === toUser)) return 'not_member';
      if (maxOwned > 0 && (await this.countOwnedTeams(toUser, q)) >= maxOwned) return 'quota';
      await q(`update team_members set member_role = 'admin' where team_id = ? and user_id = ?`, [teamId, fromUser]);
      await q(`update team_members set member_role = 'owner' where team_id = ? and user_id = ?`, [teamId, toUser]);
      await q(`update teams set owner_id = ?, is_personal = false, updated_at = ? where id = ?`, [toUser, now, teamId]);
      await recorderOn(q, audit)();
      return 'ok';
    });
  }

  // ---- invitations ---------------------------------------------------------------------------

  async insertInvitation(i: { id: string; teamId: string; email: string; emailNorm: string; role: 'admin' | 'member'; tokenHash: string; invitedBy: string | null; expiresAt: Date; now: Date }, q: Q = this.q): Promise<void> {
    await q(
      `insert into invitations (id, team_id, email_address, email_normalized, member_role, token_hash, invited_by, expires_at, created_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [i.id, i.teamId, i.email, i.emailNorm, i.role, i.tokenHash, i.invitedBy, i.expiresAt, i.now],
    );
  }

  async invitations(teamId: string, page: PageRequest): Promise<{ rows: Array<Record<string, unknown>>; total: number }> {
    const rows = await this.q(
      `select id, email_address, member_role, invitation_status, invited_by, created_at, expires_at, accepted_at
         from invitations where team_id = ? and invitation_status <> 'revoked' order by created_at desc, id limit ${page.perPage} offset ${page.offset}`,
      [teamId],
    );
    const total = (await this.q<{ n: number }>(`select count(*)::int as n from invitations where team_id = ? and invitation_status <> 'revoked'`, [teamId]))[0]?.n ?? 0;
    return { rows, total };
  }

  async revokeInvitation(teamId: string, id: string, audit?: AuditNote): Promise<boolean> {
    return this.tx(async (q) => {
      const ok = (await q(`update invitations set invitation_status = 'revoked' where id = ? and team_id = ? and invitation_status = 'pending' returning id`, [id, teamId])).length === 1;
      if (ok) await recorderOn(q, audit)();
      return ok;
    });
  }

  /** Accepts a pending invitation for this user (email must match); the outcome names what went wrong. */
  async acceptInvitation(
    tokenHash: string,
    user: { id: string; emailNorm: string },
    now: Date,
    audit?: AuditNote,
  ): Promise<{ outcome: 'ok' | 'already_member'; teamId: string } | { outcome: 'not_found' | 'expired' | 'email_mismatch' }> {
    return this.tx(async (q) => {
      const r = await q<{ id: string; team_id: string; email_normalized: string; member_role: TeamRole; expires_at: Date; invitation_status: string }>(
        `select i.* from invitations i join teams t on t.id = i.team_id and t.deleted_at is null where i.token_hash = ? for update of i`,
        [tokenHash],
      );
      const inv = r[0];
      if (!inv || inv.invitation_status !== 'pending') return { outcome: 'not_found' };
      if (inv.expires_at.getTime() <= now.getTime()) return { outcome: 'expired' };
      if (inv.email_normalized !== user.emailNorm) return { outcome: 'email_mismatch' };
      const added = await this.addMember(q, inv.team_id, user.id, inv.member_role, now);
      await q(`update invitations set invitation_status = 'accepted', accepted_by = ?, accepted_at = ? where id = ?`, [user.id, now, inv.id]);
      if (added) await recorderOn(q, audit)({ teamId: inv.team_id, targetId: inv.id, details: { member_role: inv.member_role } });
      return { outcome: added ? 'ok' : 'already_member', teamId: inv.team_id };
    });
  }

  // ---- credentials ---------------------------------------------------------------------------

  async insertCredential(
    c: { id: string; type: CredentialKind; teamId: string; userId: string | null; displayName: string; prefix: string; hash: string; linkedTo: string | null; expiresAt: Date | null; now: Date },
    q: Q = this.q,
  ): Promise<void> {
    await q(
      `insert into credentials (id, credential_type, team_id, user_id, display_name, credential_prefix, secret_hash, linked_to, expires_at, created_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [c.id, c.type, c.teamId, c.userId, c.displayName, c.prefix, c.hash, c.linkedTo, c.expiresAt, c.now],
    );
  }

  /** The authenticator's credential lookup by hash (behind CachedAuthLookup: only on a cache miss). */
  async credentialByHash(hash: string): Promise<CredentialAuthRow | null> {
    const r = await this.q<CredentialAuthRow>(
      `select c.id, c.credential_type, c.team_id, c.user_id, c.display_name, c.linked_to, c.expires_at, c.revoked_at,
              (t.deleted_at is not null) as team_deleted,
              (select m.member_role from team_members m where m.team_id = c.team_id and m.user_id = c.user_id) as member_role
         from credentials c join teams t on t.id = c.team_id
        where c.secret_hash = ?`,
      [hash],
    );
    return r[0] ?? null;
  }

  async credentials(teamId: string, page: PageRequest): Promise<{ rows: Array<Record<string, unknown>>; total: number }> {
    const rows = await this.q(
      `select c.id, c.credential_type, c.display_name, c.credential_prefix, c.user_id, u.display_name as creator_name,
              c.created_at, c.expires_at, c.last_used_at, c.linked_to
         from credentials c left join users u on u.id = c.user_id
        where c.team_id = ? and c.revoked_at is null
        order by c.created_at desc, c.id limit ${page.perPage} offset ${page.offset}`,
      [teamId],
    );
    const total = (await this.q<{ n: number }>(`select count(*)::int as n from credentials where team_id = ? and revoked_at is null`, [teamId]))[0]?.n ?? 0;
    return { rows, total };
  }

  async credentialInTeam(teamId: string, id: string): Promise<{ id: string; credential_type: CredentialKind; user_id: string | null; linked_to: string | null } | null> {
    const r = await this.q<{ id: string; credential_type: CredentialKind; user_id: string | null; linked_to: string | null }>(
      `select id, credential_type, user_id, linked_to from credentials where id = ? and team_id = ? and revoked_at is null`,
      [id, teamId],
    );
    return r[0] ?? null;
  }

  /**
   * Revokes one credential of this team, and when it is a device credential minted by pairing, the
   * agent credential minted with it, in one transaction. Returns the ids revoked (empty: not found
   * in this team).
   */
  async revokeCredential(teamId: string, id: string, now: Date, audit?: AuditNote): Promise<string[]> {
    return this.tx(async (q) => {
      const r = await q<{ credential_type: CredentialKind; linked_to: string | null }>(
        `update credentials set revoked_at = ? where id = ? and team_id = ? and revoked_at is null returning credential_type, linked_to`,
        [now, id, teamId],
      );
      const row = r[0];
      if (!row) return [];
      const revoked = [id];
      if (row.credential_type === 'device' && row.linked_to) {
        const linked = await q<{ id: string }>(
          `update credentials set revoked_at = ? where team_id = ? and linked_to = ? and credential_type = 'agent' and revoked_at is null returning id`,
          [now, teamId, row.linked_to],
        );
        revoked.push(...linked.map((l) => l.id));
      }
      await recorderOn(q, audit)({ details: { credential_type: row.credential_type, revoked_ids: revoked } });
      return revoked;
    });
  }

  /** Writes the batched last_used_at values (one statement). */
  async flushLastUsed(entries: Array<[string, Date]>): Promise<void> {
    if (entries.length === 0) return;
    const rows = JSON.stringify(entries.map(([id, at]) => ({ id, at: at.toISOString() })));
    // JSON, not an array binding: knex expands array bindings into comma lists
    await this.q(
      `update credentials c set last_used_at = greatest(coalesce(c.last_used_at, v.at), v.at)
         from json_to_recordset(?::json) as v(id uuid, at timestamptz) where c.id = v.id`,
      [rows],
    );
  }

  // ---- device pairing ------------------------------------------------------------------------

  async insertPairing(p: { id: string; userCode: string; pollSecretHash: string; deviceName: string; mintAgent: boolean; expiresAt: Date; now: Date }): Promise<boolean> {
    const r = await this.q(
      `insert into device_pairings (id, user_code, poll_secret_hash, device_name, mint_agent, expires_at, created_at) values (?, ?, ?, ?, ?, ?, ?)
       on conflict (user_code) where pairing_status = 'pending' do nothing returning id`,
      [p.id, p.userCode, p.pollSecretHash, p.deviceName, p.mintAgent, p.expiresAt, p.now],
    );
    return r.length === 1;
  }

  /** Binds a pending, unexpired code to a user and team (single use). */
  async confirmPairing(userCode: string, userId: string, teamId: string, now: Date, audit?: AuditNote): Promise<'ok' | 'not_found' | 'expired'> {
    const r = await this.q<{ id: string; expires_at: Date }>(`select id, expires_at from device_pairings where user_code = ? and pairing_status = 'pending'`, [userCode]);
    const p = r[0];
    if (!p) return 'not_found';
    if (p.expires_at.getTime() <= now.getTime()) return 'expired';
    return this.tx(async (q) => {
      const u = await q(
        `update device_pairings set pairing_status = 'confirmed', user_id = ?, team_id = ?, confirmed_at = ? where id = ? and pairing_status = 'pending' and expires_at > ? returning id`,
        [userId, teamId, now, p.id, now],
      );
      if (u.length !== 1) return 'not_found';
      await recorderOn(q, audit)({ targetId: p.id });
      return 'ok';
    });
  }

  async pairing(id: string): Promise<PairingRow | null> {
    return (await this.q<PairingRow>(`select * from device_pairings where id = ?`, [id]))[0] ?? null;
  }

  /** Records a poll unless the previous one was less than intervalS ago; returns the previous poll time when too fast. */
  async touchPoll(id: string, now: Date, intervalS: number): Promise<{ ok: true } | { ok: false; last: Date }> {
    const r = await this.q(
      `update device_pairings set last_polled_at = ? where id = ? and (last_polled_at is null or last_polled_at <= ?) returning id`,
      [now, id, new Date(now.getTime() - intervalS * 1000)],
    );
    if (r.length === 1) return { ok: true };
    const p = await this.pairing(id);
    return { ok: false, last: p?.last_polled_at ?? now };
  }

  /** Moves a confirmed pairing to delivered and mints its credentials in the same transaction (exactly once). */
  async deliverPairing(id: string, now: Date, mint: (q: Q, p: PairingRow) => Promise<void>): Promise<PairingRow | null> {
    return this.tx(async (q) => {
      const r = await q<PairingRow>(
        `update device_pairings set pairing_status = 'delivered', delivered_at = ? where id = ? and pairing_status = 'confirmed' and expires_at > ? returning *`,
        [now, id, now],
      );
      const p = r[0];
      if (!p) return null;
      await mint(q, p);
      return p;
    });
  }

  /** Housekeeping: expired pairings and one-time tokens, old sent mail. */
  async sweep(now: Date): Promise<void> {
    const day = 86_400_000;
    await this.q(`delete from device_pairings where expires_at < ?`, [new Date(now.getTime() - day)]);
    await this.q(`delete from one_time_tokens where expires_at < ?`, [new Date(now.getTime() - day)]);
    await this.q(`delete from email_outbox where sent_at is not null and sent_at < ?`, [new Date(now.getTime() - 7 * day)]);
    await this.q(`delete from refresh_tokens where expires_at < ?`, [new Date(now.getTime() - day)]);
    await this.deleteExpiredOidc(now);
  }
}
