import type { Database } from '../persistence/db.js';
import { inTx, q as pooled } from '../persistence/sql.js';
import type { TeamRole } from './principal.js';

/** A query function bound to a unit of work or a transaction; `?` placeholders (knex style). */
export type Q = <T = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<T[]>;

/** Timestamp columns (`*_at`) come back as strings from the driver: make them Dates. */
const isTimeColumn = (k: string): boolean => k.endsWith('_at');

function withDates<T>(rows: unknown): T[] {
  if (!Array.isArray(rows)) return [];
  for (const r of rows as Array<Record<string, unknown>>)
    for (const k of Object.keys(r)) {
      const v = r[k];
      if (typeof v === 'string' && isTimeColumn(k)) r[k] = new Date(v);
    }
  return rows as T[];
}

export interface UserRow {
  id: string;
  email_address: string;
  email_normalized: string;
  password_hash: string;
  first_name: string;
  last_name: string;
  display_name: string;
  email_verified_at: Date | null;
  /** Bumped when every session of the user must end (password reset); access tokens carry it as `sv`. */
  session_version: number;
  created_at: Date;
}

export interface UserAuthRow {
  id: string;
  session_version: number;
  /** Role in the requested team (null: not a member, or no team asked). */
  member_role: TeamRole | null;
}

/** A login session (a refresh-token family), as the authenticator checks it for every access token naming it. */
export interface SessionAuthRow {
  /** The family id (the access token's `sid`). */
  id: string;
  user_id: string;
  /** Ended by logout, refresh-token reuse or a password reset (some token of the family is revoked). Final. */
  ended: boolean;
}

export interface RefreshRow {
  id: string;
  session_version: number;
  family_id: string;
  user_id: string;
  expires_at: Date;
  rotated_at: Date | null;
  revoked_at: Date | null;
}

export interface OutboxRow {
  id: string;
  email_kind: string;
  to_address: string;
  subject: string;
  body_text: string;
  attempts: number;
}

/**
 * The identity SQL of accounts (users, sessions and their tokens, single sign-on, the email
 * outbox) and the query plumbing; IdentityStore (store.ts) adds the team-scoped statements.
 */
export class AccountStore {
  constructor(readonly db: Database) {}

  /** Autocommit statements on the pool (no unit of work, so no EntityManager fork per query). */
  q: Q = async <T>(sql: string, params?: unknown[]) => withDates<T>(await pooled(this.db)(sql, params));

  /**
   * One PostgreSQL transaction (commit on return, rollback on throw), on the driver connection: not
   * em.transactional, whose AsyncLocalStorage would put an async hook on every promise of the process.
   */
  tx<T>(fn: (q: Q) => Promise<T>): Promise<T> {
    return inTx(this.db, (tq) => fn(async <R>(sql: string, params?: unknown[]) => withDates<R>(await tq(sql, params))));
  }

  /** Serialises quota checks of one kind across nodes (inside a transaction). */
  async lock(q: Q, name: string): Promise<void> {
    await q(`select pg_advisory_xact_lock(hashtext(?))`, [`gantry:${name}`]);
  }

  // ---- users -------------------------------------------------------------------------------

  async countUsers(q: Q = this.q): Promise<number> {
    const r = await q<{ n: number }>(`select count(*)::int as n from users`);
    return r[0]?.n ?? 0;
  }

  async insertUser(q: Q, u: { id: string; email: string; emailNorm: string; passwordHash: string; firstName: string; lastName: string; displayName: string; now: Date }): Promise<boolean> {
    const r = await q(
      `insert into users (id, email_address, email_normalized, password_hash, first_name, last_name, display_name, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict (email_normalized) do nothing returning id`,
      [u.id, u.email, u.emailNorm, u.passwordHash, u.firstName, u.lastName, u.displayName, u.now, u.now],
    );
    return r.length === 1;
  }

  async userByEmail(emailNorm: string): Promise<UserRow | null> {
    return (await this.q<UserRow>(`select * from users where email_normalized = ?`, [emailNorm]))[0] ?? null;
  }

  async userById(id: string): Promise<UserRow | null> {
    return (await this.q<UserRow>(`select * from users where id = ?`, [id]))[0] ?? null;
  }

  /** The user (and, when teamId is given, their role in that live team) in one round trip. */
  async userAuth(userId: string, teamId: string | null): Promise<UserAuthRow | null> {
    const r = await this.q<UserAuthRow>(
      `select u.id, u.session_version,
              (select m.member_role from team_members m join teams t on t.id = m.team_id and t.deleted_at is null
                where m.user_id = u.id and m.team_id = ?::uuid) as member_role
         from users u where u.id = ?`,
      [teamId, userId],
    );
    return r[0] ?? null;
  }

  /**
   * A new password ends everything minted from the user's sessions, in one transaction: the session
   * version (every access token), every refresh token, every device credential (dk-) of the user and
   * the agent credential (ak-) minted with each by pairing. Returns the ids of the credentials revoked.
   */
  async setPassword(userId: string, passwordHash: string, now: Date): Promise<string[]> {
    return this.tx(async (q) => {
      await q(`update users set password_hash = ?, session_version = session_version + 1, updated_at = ? where id = ?`, [passwordHash, now, userId]);
      await q(`update refresh_tokens set revoked_at = ? where user_id = ? and revoked_at is null`, [now, userId]);
      const devices = await q<{ id: string; team_id: string; linked_to: string | null }>(
        `update credentials set revoked_at = ? where user_id = ? and credential_type = 'device' and revoked_at is null returning id, team_id, linked_to`,
        [now, userId],
      );
      const revoked = devices.map((d) => d.id);
      for (const d of devices) {
        if (!d.linked_to) continue;
        const linked = await q<{ id: string }>(
          `update credentials set revoked_at = ? where team_id = ? and linked_to = ? and credential_type = 'agent' and revoked_at is null returning id`,
          [now, d.team_id, d.linked_to],
        );
        revoked.push(...linked.map((l) => l.id));
      }
      return revoked;
    });
  }

  async markEmailVerified(userId: string, now: Date, q: Q = this.q): Promise<void> {
    await q(`update users set email_verified_at = coalesce(email_verified_at, ?), updated_at = ? where id = ?`, [now, now, userId]);
  }

  // ---- refresh tokens ------------------------------------------------------------------------

  async insertRefresh(r: { id: string; familyId: string; userId: string; hash: string; expiresAt: Date; now: Date }, q: Q = this.q): Promise<void> {
    await q(`insert into refresh_tokens (id, family_id, user_id, token_hash, expires_at, created_at) values (?, ?, ?, ?, ?, ?)`, [r.id, r.familyId, r.userId, r.hash, r.expiresAt, r.now]);
  }

  async refreshByHash(hash: string): Promise<RefreshRow | null> {
    return (await this.q<RefreshRow>(`select r.id, r.family_id, r.user_id, r.expires_at, r.rotated_at, r.revoked_at, u.session_version
         from refresh_tokens r join users u on u.id = r.user_id where r.token_hash = ?`, [hash]))[0] ?? null;
  }

  /** Marks the token rotated if it still is the live one; false means someone used it already (reuse). */
  async rotateRefresh(id: string, now: Date, q: Q = this.q): Promise<boolean> {
    return (await q(`update refresh_tokens set rotated_at = ? where id = ? and rotated_at is null and revoked_at is null returning id`, [now, id])).length === 1;
  }

  /**
   * The session an access token names: its refresh family, ended once any of its tokens is revoked
   * (revocation always covers the whole family). Null when no token of the family is left (swept
   * long after expiry, or never issued). Served by refresh_tokens_family_idx.
   */
  async sessionAuth(familyId: string): Promise<SessionAuthRow | null> {
    const r = await this.q<SessionAuthRow>(
      `select family_id as id, min(user_id::text) as user_id, bool_or(revoked_at is not null) as ended
         from refresh_tokens where family_id = ? group by family_id`,
      [familyId],
    );
    return r[0] ?? null;
  }

  async revokeFamily(familyId: string, now: Date): Promise<number> {
    return (await this.q(`update refresh_tokens set revoked_at = ? where family_id = ? and revoked_at is null returning id`, [now, familyId])).length;
  }

  // ---- one-time tokens -----------------------------------------------------------------------

  async insertOneTime(t: { id: string; type: 'password_reset' | 'email_verification'; userId: string; hash: string; expiresAt: Date; now: Date }, q: Q = this.q): Promise<void> {
    await q(`insert into one_time_tokens (id, token_type, user_id, token_hash, expires_at, created_at) values (?, ?, ?, ?, ?, ?)`, [t.id, t.type, t.userId, t.hash, t.expiresAt, t.now]);
  }

  /** Uses a token once; returns its user id, or null when unknown, used, expired or of another type. */
  async consumeOneTime(type: 'password_reset' | 'email_verification', hash: string, now: Date): Promise<string | null> {
    const r = await this.q<{ user_id: string }>(
      `update one_time_tokens set used_at = ? where token_hash = ? and token_type = ? and used_at is null and expires_at > ? returning user_id`,
      [now, hash, type, now],
    );
    return r[0]?.user_id ?? null;
  }

  // ---- single sign-on (OpenID Connect) ------------------------------------------------------

  async insertOidcState(r: { stateHash: string; providerId: string; nonce: string; codeVerifier: string; bindingHash: string; returnTo: string | null; expiresAt: Date; now: Date }): Promise<void> {
    await this.q(
      `insert into oidc_login_states (state_hash, provider_id, nonce, code_verifier, binding_hash, return_to, created_at, expires_at) values (?, ?, ?, ?, ?, ?, ?, ?)`,
      [r.stateHash, r.providerId, r.nonce, r.codeVerifier, r.bindingHash, r.returnTo, r.now, r.expiresAt],
    );
  }

  /** Takes (deletes) the state row: each authorization response is processed at most once. */
  async takeOidcState(stateHash: string): Promise<{ provider_id: string; nonce: string; code_verifier: string; binding_hash: string; return_to: string | null; expires_at: Date } | null> {
    const r = await this.q<{ provider_id: string; nonce: string; code_verifier: string; binding_hash: string; return_to: string | null; expires_at: Date }>(
      `delete from oidc_login_states where state_hash = ? returning provider_id, nonce, code_verifier, binding_hash, return_to, expires_at`,
      [stateHash],
    );
    return r[0] ?? null;
  }

  async insertLoginCode(q: Q, c: { codeHash: string; userId: string; providerId: string; expiresAt: Date; now: Date }): Promise<void> {
    await q(`insert into oidc_login_codes (code_hash, user_id, provider_id, created_at, expires_at) values (?, ?, ?, ?, ?)`, [c.codeHash, c.userId, c.providerId, c.now, c.expiresAt]);
  }

  /** Uses a login code once; its user, or null when unknown, used or expired. */
  async consumeLoginCode(codeHash: string, now: Date): Promise<string | null> {
    const r = await this.q<{ user_id: string }>(`update oidc_login_codes set used_at = ? where code_hash = ? and used_at is null and expires_at > ? returning user_id`, [now, codeHash, now]);
    return r[0]?.user_id ?? null;
  }

  async userByIdentity(q: Q, providerId: string, subject: string): Promise<UserRow | null> {
    const r = await q<UserRow>(`select u.* from user_identities i join users u on u.id = i.user_id where i.provider_id = ? and i.subject = ?`, [providerId, subject]);
    return r[0] ?? null;
  }

  async linkIdentity(q: Q, i: { providerId: string; subject: string; userId: string; email: string | null; now: Date }): Promise<void> {
    await q(
      `insert into user_identities (provider_id, subject, user_id, email_address, created_at, last_login_at) values (?, ?, ?, ?, ?, ?)
       on conflict (provider_id, subject) do update set last_login_at = excluded.last_login_at, email_address = excluded.email_address`,
      [i.providerId, i.subject, i.userId, i.email, i.now, i.now],
    );
  }

  async userByEmailIn(q: Q, emailNorm: string): Promise<UserRow | null> {
    return (await q<UserRow>(`select * from users where email_normalized = ?`, [emailNorm]))[0] ?? null;
  }

  async liveTeam(q: Q, teamId: string): Promise<boolean> {
    return (await q(`select 1 from teams where id = ? and deleted_at is null`, [teamId])).length === 1;
  }

  /** Raises a (non-owner) member's role; false when nothing changed. */
  async raiseMemberRole(q: Q, teamId: string, userId: string, role: 'admin'): Promise<boolean> {
    return (await q(`update team_members set member_role = ? where team_id = ? and user_id = ? and member_role = 'member' returning user_id`, [role, teamId, userId])).length === 1;
  }

  async deleteExpiredOidc(now: Date): Promise<void> {
    await this.q(`delete from oidc_login_states where expires_at < ?`, [now]);
    await this.q(`delete from oidc_login_codes where expires_at < ?`, [new Date(now.getTime() - 86_400_000)]);
  }

  // ---- email outbox --------------------------------------------------------------------------

  async enqueueEmail(e: { id: string; kind: string; to: string; subject: string; body: string; now: Date }, q: Q = this.q): Promise<void> {
    await q(`insert into email_outbox (id, email_kind, to_address, subject, body_text, created_at, next_attempt_at) values (?, ?, ?, ?, ?, ?, ?)`, [e.id, e.kind, e.to, e.subject, e.body, e.now, e.now]);
  }

  /** Claims due messages (skip locked: several nodes never send the same one at once). */
  async claimEmails(now: Date, limit: number, leaseS: number): Promise<OutboxRow[]> {
    return this.q<OutboxRow>(
      `update email_outbox set attempts = attempts + 1, next_attempt_at = ?
        where id in (select id from email_outbox where sent_at is null and next_attempt_at <= ? and attempts < 8
                      order by next_attempt_at limit ${Math.floor(limit)} for update skip locked)
        returning id, email_kind, to_address, subject, body_text, attempts`,
      [new Date(now.getTime() + leaseS * 1000), now],
    );
  }

  async markEmailSent(id: string, now: Date): Promise<void> {
    await this.q(`update email_outbox set sent_at = ?, last_error = null where id = ?`, [now, id]);
  }

  async markEmailFailed(id: string, error: string, retryAt: Date): Promise<void> {
    await this.q(`update email_outbox set last_error = ?, next_attempt_at = ? where id = ?`, [error.slice(0, 1000), retryAt, id]);
  }
}
