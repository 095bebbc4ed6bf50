import type { Authenticator, AuthRequest, Principal, PrincipalKind, RouteAuth, TeamRole } from './principal.js';
import { ROLE_RANK } from './principal.js';
import { badRequest, forbidden, rateLimited, unauthorized } from '../shared/errors.js';
import { isUuid } from '../shared/ids.js';
import type { Logger } from '../shared/logger.js';
import { systemClock, type Clock } from '../shared/clock.js';
import { CREDENTIAL_PREFIX_LEN, credentialFormat, hasCredentialPrefix, parseCredential, sha256Hex, type CredentialKind } from './credentials.js';
import type { AuthFailureLimiter } from './failure-limit.js';
import type { CredentialAuthRow, SessionAuthRow, UserAuthRow } from './store.js';
import { looksLikeJwt, type AccessClaims } from './tokens.js';

/**
 * What the authenticator needs from the database (a port, so unit tests can count lookups). In a
 * node it is CachedAuthLookup over IdentityStore: warm requests are answered from memory.
 */
export interface AuthLookup {
  credentialByHash(hash: string): Promise<CredentialAuthRow | null>;
  /** A cached row for this hash, without I/O (undefined when not cached); optional. */
  cachedCredential?(hash: string): CredentialAuthRow | undefined;
  userAuth(userId: string, teamId: string | null): Promise<UserAuthRow | null>;
  /** The session (refresh family) an access token names, by its `sid`. */
  sessionAuth(sessionId: string): Promise<SessionAuthRow | null>;
  flushLastUsed(entries: Array<[string, Date]>): Promise<void>;
}

export interface AccessTokenVerifier {
  verify(token: string): Promise<AccessClaims>;
}

const KIND_OF: Record<CredentialKind, PrincipalKind> = { integration: 'integration', agent: 'agent', device: 'device' };

/** The verified agent credential (for the agent gRPC stream). */
export interface AgentIdentity {
  credentialId: string;
  teamId: string;
  displayName: string;
  /** The user who created the credential (or paired the device it was minted with). */
  userId: string | null;
  /** The pairing id when the credential was minted by device pairing. */
  linkedTo: string | null;
}

/**
 * last_used_at is kept in memory and written in one batched statement every flushMs (and on
 * stop), never a database write per request: a request only sets a Map entry, so each credential
 * is written at most once per flushMs whatever its request rate, off the request path. Lists of
 * credentials overlay the pending value (peek), so this node shows the current time at once.
 */
export class LastUsedTracker {
  private pending = new Map<string, Date>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly lookup: Pick<AuthLookup, 'flushLastUsed'>,
    private readonly logger: Logger,
    private readonly flushMs = 30_000,
  ) {}

  touch(id: string, at: Date): void {
    this.pending.set(id, at);
  }

  /** A use not yet written (lists overlay it so last_used_at is current on this node). */
  peek(id: string): Date | undefined {
    return this.pending.get(id);
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.flushMs);
    this.timer.unref();
  }

  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const entries = [...this.pending];
    this.pending = new Map();
    try {
      await this.lookup.flushLastUsed(entries);
    } catch (e) {
      this.logger.warn({ err: e, count: entries.length }, 'last_used_at flush failed; will retry');
      for (const [id, at] of entries) if (!this.pending.has(id)) this.pending.set(id, at);
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
  }
}

/**
 * The spec's authentication rules, driven by each route's RouteAuth:
 * - no credential: 401 credential_missing; a malformed one (bad shape or checksum): 401
 *   credential_invalid without touching the database;
 * - JWT (EdDSA, issuer and audience pinned, `iat` not in the future beyond the skew) -> user, while
 *   its session lives: the user's session version (`sv`, bumped by a password reset) must be the
 *   current one and its session (`sid`, the refresh family) must not have ended (logout, refresh
 *   reuse), else 401 credential_revoked; both answers are cached and invalidated like credentials;
 *   `sk-` -> integration (team from the
 *   credential); `dk-` -> device (the user's identity, team from the credential); `ak-` -> 401 on
 *   every REST route;
 * - credentials are looked up by hash (from the identity cache when warm, see auth-cache.ts);
 *   revocation is effective on the next request because every revoking write invalidates the cache,
 *   and expiry because expires_at is compared with the clock on every request, cached or not
 *   (401 credential_revoked / credential_expired);
 * - a route that does not list the caller's kind: 403 (`jwtOnly401` routes: 401 for sk- and dk-;
 *   `integrationOnly401` routes, i.e. /mcp: 401 for JWT and dk-);
 * - team routes: a JWT caller must send X-Team-ID (400 team_header_missing / team_header_invalid)
 *   and be a member (403 not_a_member); sk- and dk- ignore X-Team-ID; `role` is owner > admin >
 *   member (403 insufficient_role), for dk- it is the device user's current role in the team.
 */
export class GantryAuthenticator implements Authenticator {
  constructor(
    private readonly lookup: AuthLookup,
    private readonly jwt: AccessTokenVerifier,
    private readonly lastUsed: LastUsedTracker,
    private readonly clock: Clock = systemClock,
    /** Throttles well-formed credential values that name nothing (failure-limit.ts); absent: unthrottled. */
    private readonly failures: AuthFailureLimiter | null = null,
  ) {}

  async authenticate(req: AuthRequest, auth: RouteAuth): Promise<Principal | null> {
    if (auth.kinds === 'public') return null;
    const kinds = auth.kinds;
    const header = req.headers['authorization'];
    if (header === undefined || header.trim() === '') throw unauthorized('credential_missing', 'authentication required: send Authorization: Bearer <token>');
    const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
    if (!m) throw unauthorized('credential_invalid', 'Authorization must be "Bearer <token>"');
    const token = m[1] as string;

    if (hasCredentialPrefix(token)) return this.credential(token, auth, kinds, req.ip);
    if (!looksLikeJwt(token)) throw unauthorized('credential_invalid', 'invalid credential');
    return this.user(await this.jwt.verify(token), req, auth, kinds);
  }

  private async user(claims: AccessClaims, req: AuthRequest, auth: RouteAuth, kinds: readonly PrincipalKind[]): Promise<Principal> {
    if (!kinds.includes('user')) {
      if (auth.integrationOnly401) throw unauthorized('integration_credential_required', 'this endpoint accepts integration credentials (sk-) only');
      if (kinds.includes('integration') && !kinds.includes('device')) throw forbidden('integration_credential_required', 'this endpoint accepts integration credentials (sk-) only');
      if (kinds.includes('device') && !kinds.includes('integration')) throw forbidden('device_credential_required', 'this endpoint accepts device credentials (dk-) only');
      throw forbidden('user_credential_not_allowed', 'this endpoint does not accept user sessions');
    }
    let teamId: string | null = null;
    if (auth.team) {
      const raw = req.headers['x-team-id'];
      if (raw === undefined || raw.trim() === '') throw badRequest('team_header_missing', 'X-Team-ID header is required on team-scoped endpoints');
      if (!isUuid(raw.trim())) throw badRequest('team_header_invalid', 'X-Team-ID must be a team id (uuid)');
      teamId = raw.trim().toLowerCase();
    }
    const [u, session] = await Promise.all([this.lookup.userAuth(claims.userId, teamId), this.lookup.sessionAuth(claims.sessionId)]);
    if (!u) throw unauthorized('credential_invalid', 'the account of this session no longer exists');
    if (claims.sessionVersion !== u.session_version)
      throw unauthorized('credential_revoked', 'this session was revoked (password changed); log in again');
    if (!session || session.ended || session.user_id !== claims.userId) throw unauthorized('credential_revoked', 'this session has ended (logged out or revoked); log in again');
    if (!teamId) return { kind: 'user', userId: claims.userId, sessionId: claims.sessionId };
    if (!u.member_role) throw forbidden('not_a_member', 'you are not a member of this team');
    checkRole(auth.role, u.member_role);
    return { kind: 'user', userId: claims.userId, teamId, role: u.member_role, sessionId: claims.sessionId };
  }

  private async credential(token: string, auth: RouteAuth, kinds: readonly PrincipalKind[], ip: string): Promise<Principal> {
    const ck = credentialFormat(token);
    if (!ck) throw unauthorized('credential_invalid', 'invalid credential');
    const kind = KIND_OF[ck];
    // ak- is for the agent stream only: rejected before any lookup on REST routes
    if (kind === 'agent' && !kinds.includes('agent')) throw unauthorized('agent_credential_not_allowed', 'agent credentials (ak-) are accepted by the agent stream only');
    const hash = sha256Hex(token);
    // a value whose SHA-256 is a cached credential's hash is that credential, checksum included;
    // anything else has its checksum verified before it may cost a lookup
    const cached = this.lookup.cachedCredential?.(hash);
    if (!cached && parseCredential(token) !== ck) throw unauthorized('credential_invalid', 'invalid credential');
    const row = this.check(cached ?? (await this.lookupLimited(token, hash, ip)), ck);
    if (!kinds.includes(kind)) {
      if (auth.jwtOnly401) throw unauthorized('user_session_required', 'this endpoint accepts user sessions (JWT) only');
      if (auth.integrationOnly401) throw unauthorized('integration_credential_required', 'this endpoint accepts integration credentials (sk-) only');
      if (kind === 'integration') throw forbidden('integration_credential_not_allowed', 'integration credentials (sk-) are accepted on /r/ and /mcp only');
      throw forbidden('device_credential_not_allowed', 'device credentials (dk-) are not accepted on this endpoint');
    }
    this.lastUsed.touch(row.id, new Date(this.clock.now()));
    if (kind === 'device') {
      if (!row.user_id) throw unauthorized('credential_revoked', 'the user of this device credential no longer exists');
      const p: Principal = { kind, userId: row.user_id, teamId: row.team_id, credentialId: row.id };
      if (auth.team) {
        if (!row.member_role) throw forbidden('not_a_member', 'the user of this device is no longer a member of its team');
        checkRole(auth.role, row.member_role);
      }
      if (row.member_role) p.role = row.member_role;
      return p;
    }
    // integration and agent credentials carry a team, no user; they pass member-level routes only
    if (auth.team && auth.role && auth.role !== 'member') throw forbidden('insufficient_role', `requires the ${auth.role} role`);
    return { kind, teamId: row.team_id, credentialId: row.id };
  }

  /**
   * A lookup of a well-formed value the cache does not hold, behind the failure limiter: a value
   * that failed recently is a 401 without a lookup, an IP or prefix at its failure limit a 429
   * without one, and a lookup that finds nothing counts as a failure.
   */
  private async lookupLimited(token: string, hash: string, ip: string): Promise<CredentialAuthRow | null> {
    const f = this.failures;
    if (!f) return this.lookup.credentialByHash(hash);
    const prefix = token.slice(0, CREDENTIAL_PREFIX_LEN);
    if (f.knownBad(hash)) {
      f.failed(ip, prefix, hash);
      return null;
    }
    const wait = f.refusal(ip, prefix);
    if (wait !== null) throw rateLimited(wait, 'too many failed credential checks from this address or for this credential prefix; retry later');
    const row = await this.lookup.credentialByHash(hash);
    if (!row) f.failed(ip, prefix, hash);
    return row;
  }

  /** Lookup by hash (cached or not, the checks run on every request): revoked / expired / deleted team are 401 at once. */
  private async valid(token: string, ck: CredentialKind): Promise<CredentialAuthRow> {
    return this.check(await this.lookup.credentialByHash(sha256Hex(token)), ck);
  }

  private check(row: CredentialAuthRow | null, ck: CredentialKind): CredentialAuthRow {
    if (!row || row.credential_type !== ck) throw unauthorized('credential_invalid', 'invalid credential');
    if (row.revoked_at || row.team_deleted) throw unauthorized('credential_revoked', 'this credential has been revoked');
    if (row.expires_at && row.expires_at.getTime() <= this.clock.now()) throw unauthorized('credential_expired', 'this credential has expired');
    return row;
  }

  /**
   * For the agent gRPC stream: accepts an `ak-` value only (checksum first, then the same lookup),
   * throws AppError unauthorized (credential_invalid / credential_revoked / credential_expired).
   */
  async verifyAgentCredential(value: string): Promise<AgentIdentity> {
    const ck = parseCredential(value.trim());
    if (ck !== 'agent') throw unauthorized('credential_invalid', 'an agent credential (ak-) is required');
    const row = await this.valid(value.trim(), ck);
    this.lastUsed.touch(row.id, new Date(this.clock.now()));
    return { credentialId: row.id, teamId: row.team_id, displayName: row.display_name, userId: row.user_id, linkedTo: row.linked_to };
  }
}

function checkRole(required: TeamRole | undefined, actual: TeamRole): void {
  if (required && ROLE_RANK[actual] < ROLE_RANK[required]) throw forbidden('insufficient_role', `requires the ${required} role (you are ${actual})`);
}
