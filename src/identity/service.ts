import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import type { Principal, TeamPrincipal, TeamRole } from './principal.js';
import { ROLE_RANK } from './principal.js';
import { type AppError, badRequest, conflict, forbidden, gone, notFound, unauthorized } from '../shared/errors.js';
import { uuidv7 } from '../shared/ids.js';
import { paged, type PageRequest } from '../shared/pagination.js';
import { generateCredential, maskEmail, normalizeUserCode, randomToken, sha256Hex } from './credentials.js';
import { dummyHash, hashPassword, verifyPassword } from './passwords.js';
import type { IdentityStore, Q } from './store.js';
import type { JwtService } from './tokens.js';
import type { Mailer } from './mailer.js';
import type { RateLimiter } from './rate-limit.js';
import type { LastUsedTracker } from './authenticator.js';
import type { CacheInvalidationPort, Invalidation } from './invalidation.js';
import type { AuditNote } from '../shared/audit.js';
import { recorderOn } from '../persistence/audit.js';
import { iso } from '../shared/time.js';
import { profile } from './profile.js';
import { pairPoll, pairStart } from './pairing.js';

export { PAIRING_TTL_S } from './pairing.js';

const RESET_TTL_S = 3600;
const VERIFY_TTL_S = 48 * 3600;
const INVITATION_TTL_S = 7 * 86_400;

export const normEmail = (e: string): string => e.trim().toLowerCase();

export interface TokenPair {
  access_token: string;
  refresh_token: string;
  token_type: 'Bearer';
  expires_in: number;
}

export interface IdentityServiceDeps {
  config: Config;
  store: IdentityStore;
  jwt: JwtService;
  mailer: Mailer;
  limiter: RateLimiter;
  lastUsed: LastUsedTracker;
  logger: Logger;
  pollIntervalS: number;
  /** Every write that changes what the authenticator may have cached publishes here after it commits. */
  invalidation: CacheInvalidationPort;
}

const quotaExceeded = (what: string, n: number): AppError => forbidden('quota_exceeded', `${what} quota reached (${n})`);

/**
 * Users, sessions, teams, members, invitations, credentials and device pairing.
 *
 * Cache invalidation: each write below that changes an answer the authenticator caches (credential
 * revoked, membership or role changed, password reset, team deleted) publishes an Invalidation on
 * the port once its statement or transaction has committed, before the HTTP reply is sent.
 */
export class IdentityService {
  constructor(private readonly d: IdentityServiceDeps) {}

  /**
   * Other modules (the agent stream) learn which credentials were revoked to drop live sessions.
   * Fed by the invalidation port, so a cluster implementation reaches every node's streams.
   */
  onCredentialsRevoked(cb: (ids: string[]) => void): () => void {
    return this.d.invalidation.subscribe((ev) => {
      if (ev.type !== 'credential') return;
      try {
        cb(ev.ids);
      } catch (e) {
        this.d.logger.warn({ err: e }, 'credential revocation listener failed');
      }
    });
  }

  /**
   * Applies the invalidation here at once and, in a cluster, resolves once every node applied it:
   * the request that made the change answers after that (so its effect holds on every node).
   */
  private async publish(ev: Invalidation): Promise<void> {
    try {
      await this.d.invalidation.publish(ev);
    } catch (e) {
      // the write has committed; a lost event leaves a stale entry until the cache TTL
      this.d.logger.error({ err: e, invalidation: ev.type }, 'cache invalidation failed to publish');
    }
  }

  private async emitRevoked(ids: string[]): Promise<void> {
    if (ids.length > 0) await this.publish({ type: 'credential', ids });
  }

  rateLimit(route: string, ip: string): void {
    this.d.limiter.take(route, ip);
  }

  private link(path: string, token: string): string {
    return `${this.d.config.publicUrl}${path}?token=${encodeURIComponent(token)}`;
  }

  // ---- accounts and sessions -----------------------------------------------------------------

  async register(b: { email_address: string; password: string; first_name: string; last_name: string; display_name?: string | undefined }): Promise<{ id: string }> {
    const c = this.d.config;
    if (!c.GANTRY_REGISTRATION_ENABLED) throw forbidden('registration_disabled', 'registration is disabled on this server');
    const email = b.email_address.trim();
    const emailNorm = normEmail(email);
    const displayName = (b.display_name?.trim() || `${b.first_name.trim()} ${b.last_name.trim()}`.trim()).slice(0, 255);
    const passwordHash = await hashPassword(b.password);
    const userId = uuidv7();
    const now = new Date();
    const verifyToken = randomToken();
    await this.d.store.tx(async (q) => {
      if (c.quotas.maxUsers > 0) {
        await this.d.store.lock(q, 'users');
        if ((await this.d.store.countUsers(q)) >= c.quotas.maxUsers) throw quotaExceeded('max_users', c.quotas.maxUsers);
      }
      const ok = await this.d.store.insertUser(q, { id: userId, email, emailNorm, passwordHash, firstName: b.first_name.trim(), lastName: b.last_name.trim(), displayName, now });
      if (!ok) throw conflict('email_taken', 'an account with this email address already exists');
      if (c.GANTRY_AUTO_TEAM) await this.d.store.insertTeam(q, { id: uuidv7(), displayName: `${displayName}'s team`.slice(0, 255), ownerId: userId, isPersonal: true, now });
      await this.d.store.insertOneTime({ id: uuidv7(), type: 'email_verification', userId, hash: sha256Hex(verifyToken), expiresAt: new Date(now.getTime() + VERIFY_TTL_S * 1000), now }, q);
      const link = this.link('/verify-email', verifyToken);
      await this.d.mailer.enqueue(
        { kind: 'email_verification', to: email, subject: 'Verify your Gantry email address', body: `Hello ${displayName},\n\nconfirm your email address: ${link}\n\nverification_token: ${verifyToken}\n`, link },
        q,
      );
    });
    return { id: userId };
  }

  async login(b: { email_address: string; password: string }): Promise<TokenPair> {
    const user = await this.d.store.userByEmail(normEmail(b.email_address));
    const ok = await verifyPassword(b.password, user?.password_hash ?? (await dummyHash()));
    if (!user || !ok) throw unauthorized('invalid_login', 'invalid email address or password');
    if (this.d.config.GANTRY_EMAIL_VERIFICATION_REQUIRED && !user.email_verified_at) throw forbidden('email_not_verified', 'verify your email address before logging in');
    return this.issueTokens(user.id, user.session_version, uuidv7());
  }

  private async issueTokens(userId: string, sessionVersion: number, familyId: string, q?: Q): Promise<TokenPair> {
    const refresh = randomToken();
    const now = new Date();
    await this.d.store.insertRefresh({ id: uuidv7(), familyId, userId, hash: sha256Hex(refresh), expiresAt: new Date(now.getTime() + this.d.config.GANTRY_REFRESH_TOKEN_TTL_S * 1000), now }, q);
    // the access token names its session (the family): logout and reuse detection end it at once
    const access = await this.d.jwt.issue(userId, sessionVersion, familyId);
    return { access_token: access.token, refresh_token: refresh, token_type: 'Bearer', expires_in: access.expiresIn };
  }

  /** A new session for a user authenticated elsewhere (single sign-on: src/identity/oidc.ts). */
  async sessionFor(userId: string): Promise<TokenPair> {
    const user = await this.d.store.userById(userId);
    if (!user) throw unauthorized('credential_invalid', 'the account no longer exists');
    return this.issueTokens(user.id, user.session_version, uuidv7());
  }

  /** Rotation: each refresh token works once; presenting a rotated one revokes its whole family. */
  async refresh(b: { refresh_token: string }): Promise<TokenPair> {
    const row = await this.d.store.refreshByHash(sha256Hex(b.refresh_token));
    const now = new Date();
    if (!row) throw unauthorized('refresh_token_invalid', 'invalid refresh token');
    if (row.revoked_at) throw unauthorized('refresh_token_revoked', 'this refresh token has been revoked; log in again');
    if (row.rotated_at) {
      await this.endSession(row.family_id, now);
      this.d.logger.warn({ user_id: row.user_id, family_id: row.family_id }, 'refresh token reuse: session family revoked');
      throw unauthorized('refresh_token_reused', 'this refresh token was already used; the session has been revoked, log in again');
    }
    if (row.expires_at.getTime() <= now.getTime()) throw unauthorized('refresh_token_expired', 'refresh token expired; log in again');
    const pair = await this.d.store.tx(async (q) => {
      if (!(await this.d.store.rotateRefresh(row.id, now, q))) return null;
      return this.issueTokens(row.user_id, row.session_version, row.family_id, q);
    });
    if (!pair) {
      // lost a race with another use of the same token: that is reuse too
      await this.endSession(row.family_id, now);
      throw unauthorized('refresh_token_reused', 'this refresh token was already used; the session has been revoked, log in again');
    }
    return pair;
  }

  async logout(p: Principal, b: { refresh_token: string }): Promise<void> {
    const row = await this.d.store.refreshByHash(sha256Hex(b.refresh_token));
    if (row && row.user_id === p.userId) await this.endSession(row.family_id, new Date());
  }

  /** Revokes the refresh family and, once committed, ends its access tokens (the `sid` check) on the next request. */
  private async endSession(familyId: string, now: Date): Promise<void> {
    await this.d.store.revokeFamily(familyId, now);
    await this.publish({ type: 'session', ids: [familyId] });
  }

  async forgotPassword(b: { email_address: string }): Promise<void> {
    const user = await this.d.store.userByEmail(normEmail(b.email_address));
    if (!user) return;
    const token = randomToken();
    const now = new Date();
    await this.d.store.tx(async (q) => {
      await this.d.store.insertOneTime({ id: uuidv7(), type: 'password_reset', userId: user.id, hash: sha256Hex(token), expiresAt: new Date(now.getTime() + RESET_TTL_S * 1000), now }, q);
      const link = this.link('/reset-password', token);
      await this.d.mailer.enqueue(
        { kind: 'password_reset', to: user.email_address, subject: 'Reset your Gantry password', body: `Hello ${user.display_name},\n\nreset your password (valid 1 hour): ${link}\n\nreset_token: ${token}\n\nIf you did not ask for this, ignore this email.\n`, link },
        q,
      );
    });
  }

  async resetPassword(b: { reset_token: string; new_password: string }): Promise<void> {
    const hash = await hashPassword(b.new_password);
    const now = new Date();
    const userId = await this.d.store.consumeOneTime('password_reset', sha256Hex(b.reset_token), now);
    if (!userId) throw badRequest('reset_token_invalid', 'reset_token is invalid, expired or already used');
    // bumps session_version and revokes every refresh token (all access tokens of the user end) and
    // every device credential of the user with the agent credential paired with it
    const revoked = await this.d.store.setPassword(userId, hash, now);
    await this.publish({ type: 'user', userId });
    await this.emitRevoked(revoked);
    await this.d.store.markEmailVerified(userId, now);
  }

  async verifyEmail(b: { verification_token: string }): Promise<void> {
    const now = new Date();
    const userId = await this.d.store.consumeOneTime('email_verification', sha256Hex(b.verification_token), now);
    if (!userId) throw badRequest('verification_token_invalid', 'verification_token is invalid, expired or already used');
    await this.d.store.markEmailVerified(userId, now);
  }

  // ---- profile -------------------------------------------------------------------------------

  async me(p: Principal): Promise<Record<string, unknown>> {
    const user = p.userId ? await this.d.store.userById(p.userId) : null;
    if (!user) throw unauthorized('credential_invalid', 'the account no longer exists');
    const { rows } = await this.d.store.teamsOfUser(user.id);
    return profile(this.d.config, user, rows);
  }

  // ---- teams ---------------------------------------------------------------------------------

  async createTeam(p: Principal, b: { display_name: string }, audit?: AuditNote): Promise<{ id: string }> {
    const c = this.d.config;
    const userId = requireUser(p);
    if (!c.GANTRY_MANUAL_TEAM_CREATION) throw forbidden('team_creation_disabled', 'team creation is disabled on this server');
    const id = uuidv7();
    await this.d.store.tx(async (q) => {
      if (c.quotas.maxTeams > 0) {
        await this.d.store.lock(q, 'teams');
        if ((await this.d.store.countTeams(q)) >= c.quotas.maxTeams) throw quotaExceeded('max_teams', c.quotas.maxTeams);
      }
      if (c.quotas.maxOwnedTeams > 0) {
        await this.d.store.lock(q, `owned:${userId}`);
        if ((await this.d.store.countOwnedTeams(userId, q)) >= c.quotas.maxOwnedTeams) throw quotaExceeded('max_owned_teams', c.quotas.maxOwnedTeams);
      }
      await this.d.store.insertTeam(q, { id, displayName: b.display_name.trim(), ownerId: userId, isPersonal: false, now: new Date() });
      await recorderOn(q, audit)({ teamId: id, targetId: id });
    });
    await this.publish({ type: 'membership', teamId: id, userId });
    return { id };
  }

  async listTeams(p: Principal, page: PageRequest): Promise<Record<string, unknown>> {
    const { rows, total } = await this.d.store.teamsOfUser(requireUser(p), page);
    return paged('team_list', rows.map((t) => ({ id: t.id, display_name: t.display_name, member_role: t.member_role, is_personal: t.is_personal, created_at: iso(t.created_at) })), page, total);
  }

  async currentTeam(p: TeamPrincipal): Promise<Record<string, unknown>> {
    const t = await this.d.store.team(p.teamId);
    if (!t) throw notFound('team', 'team_not_found');
    return {
      id: t.id,
      display_name: t.display_name,
      owner_id: t.owner_id,
      is_personal: t.is_personal,
      member_role: p.role ?? null,
      member_count: t.member_count,
      created_at: iso(t.created_at),
      updated_at: iso(t.updated_at),
    };
  }

  async updateTeam(p: TeamPrincipal, b: { display_name: string }, audit?: AuditNote): Promise<{ id: string }> {
    if (!(await this.d.store.updateTeam(p.teamId, b.display_name.trim(), new Date(), audit))) throw notFound('team', 'team_not_found');
    return { id: p.teamId };
  }

  async deleteTeam(p: TeamPrincipal, audit?: AuditNote): Promise<void> {
    const revoked = await this.d.store.deleteTeam(p.teamId, new Date(), audit);
    if (!revoked) throw notFound('team', 'team_not_found');
    await this.emitRevoked(revoked);
    await this.publish({ type: 'team', teamId: p.teamId });
  }

  async members(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    const { rows, total } = await this.d.store.members(p.teamId, page);
    const reduce = p.kind === 'integration';
    return paged(
      'member_list',
      rows.map((m) => ({ user_id: m.user_id, display_name: m.display_name, email_address: reduce ? maskEmail(m.email_address) : m.email_address, member_role: m.member_role, joined_at: iso(m.created_at) })),
      page,
      total,
    );
  }

  async setMemberRole(p: TeamPrincipal, userId: string, role: 'admin' | 'member', audit?: AuditNote): Promise<{ id: string }> {
    const current = await this.d.store.memberRole(p.teamId, userId);
    if (!current) throw notFound('member', 'member_not_found');
    if (current === 'owner') throw forbidden('owner_role_immutable', "the owner's role changes only by transferring ownership");
    if (!(await this.d.store.setMemberRole(p.teamId, userId, role, audit))) throw notFound('member', 'member_not_found');
    await this.publish({ type: 'membership', teamId: p.teamId, userId });
    return { id: userId };
  }

  async removeMember(p: TeamPrincipal, userId: string, audit?: AuditNote): Promise<void> {
    const target = await this.d.store.memberRole(p.teamId, userId);
    if (!target) throw notFound('member', 'member_not_found');
    const self = userId === p.userId;
    if (target === 'owner') throw self ? conflict('owner_cannot_leave', 'the owner cannot leave the team; transfer ownership first') : forbidden('owner_cannot_be_removed', 'the owner cannot be removed');
    if (!self && ROLE_RANK[p.role ?? 'member'] < ROLE_RANK.admin) throw forbidden('insufficient_role', 'requires the admin role');
    if (!(await this.d.store.removeMember(p.teamId, userId, audit))) throw notFound('member', 'member_not_found');
    await this.publish({ type: 'membership', teamId: p.teamId, userId });
  }

  async transfer(p: TeamPrincipal, newOwnerId: string, audit?: AuditNote): Promise<void> {
    const from = requireUser(p);
    if (newOwnerId === from) throw badRequest('invalid_parameter', 'new_owner_id: you already own this team');
    const r = await this.d.store.transferOwnership(p.teamId, from, newOwnerId, new Date(), this.d.config.quotas.maxOwnedTeams, audit);
    if (r === 'ok') {
      await this.publish({ type: 'membership', teamId: p.teamId, userId: from });
      await this.publish({ type: 'membership', teamId: p.teamId, userId: newOwnerId });
    }
    if (r === 'not_owner') throw forbidden('insufficient_role', 'only the owner may transfer the team');
    if (r === 'not_member') throw notFound('member', 'member_not_found');
    if (r === 'quota') throw quotaExceeded('max_owned_teams', this.d.config.quotas.maxOwnedTeams);
  }

  // ---- invitations ---------------------------------------------------------------------------

  async invite(p: TeamPrincipal, b: { email_address: string; member_role: 'admin' | 'member' }, audit?: AuditNote): Promise<{ id: string }> {
    const email = b.email_address.trim();
    const existing = await this.d.store.userByEmail(normEmail(email));
    if (existing && (await this.d.store.memberRole(p.teamId, existing.id))) throw conflict('already_member', 'this user is already a member of the team');
    const team = await this.d.store.team(p.teamId);
    if (!team) throw notFound('team', 'team_not_found');
    const token = randomToken();
    const now = new Date();
    const id = uuidv7();
    const link = this.link('/accept-invitation', token);
    await this.d.store.tx(async (q) => {
      await this.d.store.insertInvitation({ id, teamId: p.teamId, email, emailNorm: normEmail(email), role: b.member_role, tokenHash: sha256Hex(token), invitedBy: p.userId ?? null, expiresAt: new Date(now.getTime() + INVITATION_TTL_S * 1000), now }, q);
      await this.d.mailer.enqueue(
        {
          kind: 'invitation',
          to: email,
          subject: `You are invited to join ${team.display_name} on Gantry`,
          body: `You have been invited to join the team "${team.display_name}" as ${b.member_role}.\n\nAccept (valid 7 days): ${link}\n\ninvitation_token: ${token}\n`,
          link,
        },
        q,
      );
      await recorderOn(q, audit)({ targetId: id, details: { member_role: b.member_role } });
    });
    return { id };
  }

  async invitations(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    const { rows, total } = await this.d.store.invitations(p.teamId, page);
    const now = Date.now();
    return paged(
      'invitation_list',
      rows.map((r) => {
        const expires = r.expires_at as Date;
        const status = r.invitation_status === 'pending' && expires.getTime() <= now ? 'expired' : r.invitation_status;
        return { id: r.id, email_address: r.email_address, member_role: r.member_role, invitation_status: status, invited_by: r.invited_by ?? null, created_at: iso(r.created_at as Date), expires_at: iso(expires) };
      }),
      page,
      total,
    );
  }

  async revokeInvitation(p: TeamPrincipal, id: string, audit?: AuditNote): Promise<void> {
    if (!(await this.d.store.revokeInvitation(p.teamId, id, audit))) throw notFound('invitation', 'invitation_not_found');
  }

  async acceptInvitation(p: Principal, b: { invitation_token: string }, audit?: AuditNote): Promise<void> {
    const user = await this.d.store.userById(requireUser(p));
    if (!user) throw unauthorized('credential_invalid', 'the account no longer exists');
    const r = await this.d.store.acceptInvitation(sha256Hex(b.invitation_token), { id: user.id, emailNorm: user.email_normalized }, new Date(), audit);
    if (r.outcome === 'ok') await this.publish({ type: 'membership', teamId: r.teamId, userId: user.id });
    if (r.outcome === 'not_found') throw notFound('invitation', 'invitation_not_found');
    if (r.outcome === 'expired') throw gone('invitation_expired', 'this invitation has expired; ask for a new one');
    if (r.outcome === 'email_mismatch') throw forbidden('invitation_email_mismatch', 'this invitation was sent to another email address');
    if (r.outcome === 'already_member') throw conflict('already_member', 'you are already a member of this team');
  }

  // ---- credentials ---------------------------------------------------------------------------

  async createCredential(
    p: TeamPrincipal,
    b: { credential_type: 'integration' | 'agent'; display_name: string; expires_in_days?: number | undefined },
    audit?: AuditNote,
  ): Promise<{ id: string; credential_value: string; credential_prefix: string }> {
    if (b.credential_type === 'agent' && ROLE_RANK[p.role ?? 'member'] < ROLE_RANK.admin) throw forbidden('insufficient_role', 'creating agent credentials requires the admin role');
    const gen = generateCredential(b.credential_type);
    const now = new Date();
    const id = uuidv7();
    const expiresAt = b.expires_in_days ? new Date(now.getTime() + b.expires_in_days * 86_400_000) : null;
    await this.d.store.tx(async (q) => {
      await this.d.store.insertCredential({ id, type: b.credential_type, teamId: p.teamId, userId: p.userId ?? null, displayName: b.display_name.trim(), prefix: gen.prefix, hash: gen.hash, linkedTo: null, expiresAt, now }, q);
      await recorderOn(q, audit)({ targetId: id, details: { credential_type: b.credential_type, credential_prefix: gen.prefix } });
    });
    return { id, credential_value: gen.value, credential_prefix: gen.prefix };
  }

  async listCredentials(p: TeamPrincipal, page: PageRequest): Promise<Record<string, unknown>> {
    const { rows, total } = await this.d.store.credentials(p.teamId, page);
    return paged(
      'credential_list',
      rows.map((r) => {
        const pending = this.d.lastUsed.peek(r.id as string);
        const stored = r.last_used_at as Date | null;
        const last = pending && (!stored || pending > stored) ? pending : stored;
        return {
          id: r.id,
          credential_type: r.credential_type,
          display_name: r.display_name,
          credential_prefix: r.credential_prefix,
          creator_id: r.user_id ?? null,
          creator_name: r.creator_name ?? null,
          created_at: iso(r.created_at as Date),
          expires_at: iso(r.expires_at as Date | null),
          last_used_at: iso(last),
        };
      }),
      page,
      total,
    );
  }

  /** Admins revoke any credential of the team; members their own. */
  async revokeCredential(p: TeamPrincipal, id: string, audit?: AuditNote): Promise<void> {
    const c = await this.d.store.credentialInTeam(p.teamId, id);
    if (!c) throw notFound('credential', 'credential_not_found');
    if (ROLE_RANK[p.role ?? 'member'] < ROLE_RANK.admin && c.user_id !== p.userId) throw forbidden('insufficient_role', 'only admins revoke credentials created by others');
    await this.emitRevoked(await this.d.store.revokeCredential(p.teamId, id, new Date(), audit));
  }

  // ---- device pairing (RFC 8628 style) -------------------------------------------------------

  async pairStart(b: { device_name: string; agent_credential?: boolean | undefined }): Promise<Record<string, unknown>> {
    return pairStart(this.d, b);
  }

  async pairConfirm(p: TeamPrincipal, b: { user_code: string }, audit?: AuditNote): Promise<void> {
    const code = normalizeUserCode(b.user_code);
    if (!code) throw badRequest('invalid_parameter', 'user_code: must be the 8-character code shown on the device (e.g. ABCD-2345)');
    const r = await this.d.store.confirmPairing(code, requireUser(p), p.teamId, new Date(), audit);
    if (r === 'not_found') throw notFound('pairing code', 'pairing_not_found');
    if (r === 'expired') throw gone('pairing_expired', 'this pairing code has expired; start pairing again on the device');
  }

  async pairPoll(b: { pairing_id: string; poll_secret: string }): Promise<Record<string, unknown>> {
    return pairPoll(this.d, b);
  }

  /** Revokes the calling dk- and the agent credential minted with it. */
  async deviceRevoke(p: Principal, audit?: AuditNote): Promise<void> {
    if (p.kind !== 'device' || !p.credentialId || !p.teamId) throw forbidden('device_credential_required', 'call this with the device credential (dk-) to revoke');
    await this.emitRevoked(await this.d.store.revokeCredential(p.teamId, p.credentialId, new Date(), audit));
  }
}

function requireUser(p: Principal): string {
  if (!p.userId) throw forbidden('user_required', 'this operation needs a user identity');
  return p.userId;
}

export type { TeamRole };
