/**
 * The identity use cases: accounts and sessions (register, login, refresh, logout, password reset,
 * email verification), device pairing, credentials (sk-, ak-), the profile, and teams (members,
 * invitations, ownership). The faces decode the body and hand the caller's principal (and, for the
 * anonymous routes, its IP for the rate limits) to these; the rules themselves (hashing, tokens,
 * roles, quotas, cache invalidation) are the identity service's, behind the ports below.
 */
import type { Principal, TeamPrincipal } from '../identity/principal.js';
import type { AuditNote } from '../shared/audit.js';
import type { PageRequest } from '../shared/pagination.js';

export interface TokenPair {
  access_token: string;
  refresh_token: string;
  token_type: 'Bearer';
  expires_in: number;
}

type Paged = Record<string, unknown>;

/** The per-IP rate limits of the anonymous routes (throws 429 rate_limited). */
export interface AnonymousRateLimits {
  rateLimit(route: 'register' | 'login' | 'refresh' | 'forgot' | 'pair_start' | 'pair_confirm', ip: string): void;
}

/** Accounts, sessions, pairing, credentials and the profile (src/identity/service.ts IdentityService). */
export interface Accounts extends AnonymousRateLimits {
  register(b: { email_address: string; password: string; first_name: string; last_name: string; display_name?: string | undefined }): Promise<{ id: string }>;
  login(b: { email_address: string; password: string }): Promise<TokenPair>;
  refresh(b: { refresh_token: string }): Promise<TokenPair>;
  logout(p: Principal, b: { refresh_token: string }): Promise<void>;
  forgotPassword(b: { email_address: string }): Promise<void>;
  resetPassword(b: { reset_token: string; new_password: string }): Promise<void>;
  verifyEmail(b: { verification_token: string }): Promise<void>;
  me(p: Principal): Promise<Record<string, unknown>>;
  pairStart(b: { device_name: string; agent_credential?: boolean | undefined }): Promise<Record<string, unknown>>;
  pairConfirm(p: TeamPrincipal, b: { user_code: string }, audit?: AuditNote): Promise<void>;
  pairPoll(b: { pairing_id: string; poll_secret: string }): Promise<Record<string, unknown>>;
  deviceRevoke(p: Principal, audit?: AuditNote): Promise<void>;
  createCredential(p: TeamPrincipal, b: { credential_type: 'integration' | 'agent'; display_name: string; expires_in_days?: number | undefined }, audit?: AuditNote): Promise<{ id: string; credential_value: string; credential_prefix: string }>;
  listCredentials(p: TeamPrincipal, page: PageRequest): Promise<Paged>;
  revokeCredential(p: TeamPrincipal, id: string, audit?: AuditNote): Promise<void>;
}

/** Teams, members, invitations and ownership (src/identity/service.ts IdentityService). */
export interface Teams {
  createTeam(p: Principal, b: { display_name: string }, audit?: AuditNote): Promise<{ id: string }>;
  listTeams(p: Principal, page: PageRequest): Promise<Paged>;
  currentTeam(p: TeamPrincipal): Promise<Record<string, unknown>>;
  updateTeam(p: TeamPrincipal, b: { display_name: string }, audit?: AuditNote): Promise<{ id: string }>;
  deleteTeam(p: TeamPrincipal, audit?: AuditNote): Promise<void>;
  members(p: TeamPrincipal, page: PageRequest): Promise<Paged>;
  setMemberRole(p: TeamPrincipal, userId: string, role: 'admin' | 'member', audit?: AuditNote): Promise<{ id: string }>;
  removeMember(p: TeamPrincipal, userId: string, audit?: AuditNote): Promise<void>;
  transfer(p: TeamPrincipal, newOwnerId: string, audit?: AuditNote): Promise<void>;
  invite(p: TeamPrincipal, b: { email_address: string; member_role: 'admin' | 'member' }, audit?: AuditNote): Promise<{ id: string }>;
  invitations(p: TeamPrincipal, page: PageRequest): Promise<Paged>;
  revokeInvitation(p: TeamPrincipal, id: string, audit?: AuditNote): Promise<void>;
  acceptInvitation(p: Principal, b: { invitation_token: string }, audit?: AuditNote): Promise<void>;
}

export type Success = { is_success: true };
const ok: Success = { is_success: true };

/** The audit note of a write whose action the use case chooses (e.g. member.leave or member.remove). */
export type AuditFor = (action: string) => AuditNote;

export class AccountUseCases {
  constructor(private readonly svc: Accounts) {}

  async register(ip: string, b: Parameters<Accounts['register']>[0]): Promise<{ id: string }> {
    this.svc.rateLimit('register', ip);
    return this.svc.register(b);
  }

  async login(ip: string, b: { email_address: string; password: string }): Promise<TokenPair> {
    this.svc.rateLimit('login', ip);
    return this.svc.login(b);
  }

  async refresh(ip: string, b: { refresh_token: string }): Promise<TokenPair> {
    this.svc.rateLimit('refresh', ip);
    return this.svc.refresh(b);
  }

  /** Revokes the refresh token's family. */
  async logout(p: Principal, b: { refresh_token: string }): Promise<Success> {
    await this.svc.logout(p, b);
    return ok;
  }

  /** Answers the same whether or not the address is known. */
  async forgotPassword(ip: string, b: { email_address: string }): Promise<Success> {
    this.svc.rateLimit('forgot', ip);
    await this.svc.forgotPassword(b);
    return ok;
  }

  async resetPassword(ip: string, b: { reset_token: string; new_password: string }): Promise<Success> {
    this.svc.rateLimit('forgot', ip);
    await this.svc.resetPassword(b);
    return ok;
  }

  async verifyEmail(b: { verification_token: string }): Promise<Success> {
    await this.svc.verifyEmail(b);
    return ok;
  }

  /** The calling dk- credential (and the agent credentials minted with it). */
  async deviceRevoke(p: Principal, audit: AuditNote): Promise<Success> {
    await this.svc.deviceRevoke(p, audit);
    return ok;
  }

  async pairStart(ip: string, b: { device_name: string; agent_credential?: boolean | undefined }): Promise<Record<string, unknown>> {
    this.svc.rateLimit('pair_start', ip);
    return this.svc.pairStart(b);
  }

  async pairConfirm(ip: string, p: TeamPrincipal, b: { user_code: string }, audit: AuditNote): Promise<Success> {
    this.svc.rateLimit('pair_confirm', ip);
    await this.svc.pairConfirm(p, b, audit);
    return ok;
  }

  /** The credentials are answered once, when the pairing is confirmed. */
  async pairPoll(b: { pairing_id: string; poll_secret: string }): Promise<Record<string, unknown>> {
    return this.svc.pairPoll(b);
  }

  /** An sk- or ak- credential (ak- needs admin); the value is answered once. */
  async createCredential(p: TeamPrincipal, b: { credential_type: 'integration' | 'agent'; display_name: string; expires_in_days?: number | null | undefined }, audit: AuditNote): Promise<{ id: string; credential_value: string; credential_prefix: string }> {
    return this.svc.createCredential(p, { credential_type: b.credential_type, display_name: b.display_name, expires_in_days: b.expires_in_days ?? undefined }, audit);
  }

  /** Never the value. */
  async listCredentials(p: TeamPrincipal, page: PageRequest): Promise<Paged> {
    return this.svc.listCredentials(p, page);
  }

  async revokeCredential(p: TeamPrincipal, id: string, audit: AuditNote): Promise<Success> {
    await this.svc.revokeCredential(p, id, audit);
    return ok;
  }

  /** The caller's profile, teams and feature flags. */
  async me(p: Principal): Promise<Record<string, unknown>> {
    return this.svc.me(p);
  }
}

export class TeamUseCases {
  constructor(private readonly svc: Teams) {}

  async createTeam(p: Principal, b: { display_name: string }, audit: AuditNote): Promise<{ id: string }> {
    return this.svc.createTeam(p, b, audit);
  }

  async listTeams(p: Principal, page: PageRequest): Promise<Paged> {
    return this.svc.listTeams(p, page);
  }

  async currentTeam(p: TeamPrincipal): Promise<Record<string, unknown>> {
    return this.svc.currentTeam(p);
  }

  async renameTeam(p: TeamPrincipal, b: { display_name: string }, audit: AuditFor): Promise<{ id: string }> {
    return this.svc.updateTeam(p, b, audit('team.update'));
  }

  /** Owner only. */
  async deleteTeam(p: TeamPrincipal, audit: AuditFor): Promise<Success> {
    await this.svc.deleteTeam(p, audit('team.delete'));
    return ok;
  }

  async members(p: TeamPrincipal, page: PageRequest): Promise<Paged> {
    return this.svc.members(p, page);
  }

  /** Answers the member's user id; ownership changes only through transfer. */
  async setMemberRole(p: TeamPrincipal, userId: string, role: 'admin' | 'member', audit: AuditNote): Promise<{ id: string }> {
    return this.svc.setMemberRole(p, userId, role, audit);
  }

  /** Removing oneself is leaving the team (audited as member.leave). */
  async removeMember(p: TeamPrincipal, userId: string, audit: AuditFor): Promise<Success> {
    await this.svc.removeMember(p, userId, audit(userId === p.userId ? 'member.leave' : 'member.remove'));
    return ok;
  }

  async invite(p: TeamPrincipal, b: { email_address: string; member_role: 'admin' | 'member' }, audit: AuditNote): Promise<{ id: string }> {
    return this.svc.invite(p, b, audit);
  }

  async invitations(p: TeamPrincipal, page: PageRequest): Promise<Paged> {
    return this.svc.invitations(p, page);
  }

  async revokeInvitation(p: TeamPrincipal, id: string, audit: AuditNote): Promise<Success> {
    await this.svc.revokeInvitation(p, id, audit);
    return ok;
  }

  async acceptInvitation(p: Principal, b: { invitation_token: string }, audit: AuditNote): Promise<Success> {
    await this.svc.acceptInvitation(p, b, audit);
    return ok;
  }

  /** Owner only; the new owner must already be a member (ids compared lower-cased). */
  async transfer(p: TeamPrincipal, newOwnerId: string, audit: (to: string) => AuditNote): Promise<Success> {
    const to = newOwnerId.toLowerCase();
    await this.svc.transfer(p, to, audit(to));
    return ok;
  }
}

/** Single sign-on (src/identity/oidc.ts OidcLogin): a login at an OpenID Connect provider becomes a one-time code, exchanged for the token pair. */
export interface SsoLogin {
  start(providerId: string, returnTo: string | null): Promise<{ location: string; cookieName: string; binding: string; maxAgeS: number }>;
  callback(providerId: string, rawQuery: string, cookies: string | undefined, origin: { requestId: string; ip: string }): Promise<{ userId: string; code: string; returnTo: string | null; created: boolean }>;
  exchange(code: string): Promise<TokenPair>;
}

/** The single sign-on use cases; start and exchange count against the login rate limit of the caller's IP. */
export class SsoUseCases {
  constructor(private readonly d: { sso: SsoLogin; limits: AnonymousRateLimits }) {}

  /** Where to send the browser (the provider's authorization URL) and the binding cookie's parts. */
  async start(ip: string, providerId: string, returnTo: string | null): Promise<{ location: string; cookieName: string; binding: string; maxAgeS: number }> {
    this.d.limits.rateLimit('login', ip);
    return this.d.sso.start(providerId, returnTo);
  }

  /** The provider's redirect back: the user (created on first login) and a one-time code for return_to or the caller. */
  async callback(providerId: string, rawQuery: string, cookies: string | undefined, origin: { requestId: string; ip: string }): Promise<{ userId: string; code: string; returnTo: string | null; created: boolean }> {
    return this.d.sso.callback(providerId, rawQuery, cookies, origin);
  }

  async exchange(ip: string, code: string): Promise<TokenPair> {
    this.d.limits.rateLimit('login', ip);
    return this.d.sso.exchange(code);
  }
}
