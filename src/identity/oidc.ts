/**
 * Single sign-on with OpenID Connect (docs/api.md "Single sign-on"): the authorization code flow
 * with PKCE (S256), state and nonce, for each provider of GANTRY_OAUTH_PROVIDERS.
 *
 *   start:    discovery (cached), a state row (state, nonce, PKCE verifier, the hash of a random
 *             browser-binding value sent as an HttpOnly cookie), 302 to the provider.
 *   callback: the state row is taken (single use, any node of a cluster), the binding cookie must
 *             match, openid-client exchanges the code (PKCE verifier) and checks the ID token's
 *             claims (iss, aud, azp, exp, iat, nonce); jose then verifies its signature against the
 *             provider's JWKS (pinned to asymmetric algorithms) and iss/aud again. The user is
 *             found by (provider, sub), else linked by verified email when the provider allows it,
 *             else created (with a personal team when GANTRY_AUTO_TEAM); group-claim mappings grant
 *             team roles (never demote, never touch an owner), each grant audited. The browser (or
 *             CLI) gets a one-time login code, exchanged once for the usual token pair.
 *
 * Registration by password (GANTRY_REGISTRATION_ENABLED) does not gate it: create_users does.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import * as oidc from 'openid-client';
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from 'jose';
import type { Config, OidcProviderConfig } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { AppError, badGateway, badRequest, conflict, forbidden, invalidParameter, notFound, unauthorized } from '../shared/errors.js';
import { uuidv7 } from '../shared/ids.js';
import type { AuditActor } from '../shared/audit.js';
import { recorderOn } from '../persistence/audit.js';
import { sha256Hex } from './credentials.js';
import type { IdentityStore, UserRow } from './store.js';
import type { IdentityService, TokenPair } from './service.js';
import type { CacheInvalidationPort } from './invalidation.js';
import { normEmail } from './service.js';

export const OIDC_STATE_TTL_S = 600;
export const OIDC_CODE_TTL_S = 120;
/** The binding cookie's name for one state (parallel logins in one browser do not collide). */
export const bindingCookieName = (state: string): string => `gantry_oidc_${sha256Hex(state).slice(0, 16)}`;

/** Signature algorithms accepted for ID tokens: asymmetric only (never `none`, never HMAC with the client secret). */
const ASYMMETRIC = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];

interface Discovered {
  cfg: oidc.Configuration;
  jwks: ReturnType<typeof createRemoteJWKSet>;
  algorithms: string[];
  issuer: string;
}

export interface OidcDeps {
  config: Config;
  store: IdentityStore;
  identity: IdentityService;
  invalidation: CacheInvalidationPort;
  logger: Logger;
  /** The node's public origin (GANTRY_PUBLIC_URL, or its listen address): the redirect URI is built on it. */
  publicUrl: () => string;
  now?: () => Date;
}

export interface CallbackResult {
  userId: string;
  code: string;
  returnTo: string | null;
  created: boolean;
}

/** A login that failed after its state was taken, whose browser goes back to return_to with the error. */
export class OidcFailure extends Error {
  constructor(
    readonly error: AppError,
    readonly returnTo: string,
  ) {
    super(error.message);
  }
}

const sso = (status: 'bad_request' | 'unauthorized' | 'forbidden' | 'conflict', code: string, message: string): AppError => new AppError(status, code, message);

export class OidcLogin {
  private readonly discovered = new Map<string, Promise<Discovered>>();
  private readonly now: () => Date;

  constructor(private readonly d: OidcDeps) {
    this.now = d.now ?? (() => new Date());
  }

  /** id and display name of each provider (server-info). */
  providers(): Array<{ id: string; display_name: string }> {
    return this.d.config.oidcProviders.map((p) => ({ id: p.id, display_name: p.display_name ?? p.id }));
  }

  private provider(id: string): OidcProviderConfig {
    const p = this.d.config.oidcProviders.find((x) => x.id === id);
    if (!p) throw notFound(`single sign-on provider ${JSON.stringify(id.slice(0, 64))}`, 'oidc_provider_not_found');
    return p;
  }

  redirectUri(p: { id: string }): string {
    return `${this.d.publicUrl().replace(/\/+$/, '')}/api/v1/auth/oidc/${encodeURIComponent(p.id)}/callback`;
  }

  /** Discovery once per provider (a failure is not cached: the next login tries again). */
  private discover(p: OidcProviderConfig): Promise<Discovered> {
    let d = this.discovered.get(p.id);
    if (!d) {
      d = (async () => {
        const cfg = await oidc.discovery(new URL(p.issuer), p.client_id, p.client_secret, p.client_secret ? oidc.ClientSecretBasic(p.client_secret) : oidc.None(), {
          ...(p.allow_insecure_http ? { execute: [oidc.allowInsecureRequests] } : {}),
          timeout: 10,
        });
        const meta = cfg.serverMetadata();
        if (!meta.jwks_uri) throw new Error('the provider publishes no jwks_uri');
        const advertised = meta.id_token_signing_alg_values_supported ?? ['RS256'];
        const algorithms = advertised.filter((a) => ASYMMETRIC.includes(a));
        if (algorithms.length === 0) throw new Error(`the provider signs ID tokens with none of ${ASYMMETRIC.join(', ')}`);
        return { cfg, jwks: createRemoteJWKSet(new URL(meta.jwks_uri), { timeoutDuration: 10_000 }), algorithms, issuer: meta.issuer };
      })();
      this.discovered.set(p.id, d);
      d.catch(() => this.discovered.delete(p.id));
    }
    return d.catch((e: unknown) => {
      this.d.logger.warn({ provider: p.id, err_message: (e as Error).message }, 'oidc discovery failed');
      throw badGateway('oidc_discovery_failed', `the single sign-on provider ${p.id} could not be reached or its discovery document is invalid`);
    });
  }

  /**
   * return_to must be this server's own origin, or a loopback address (a CLI's local listener,
   * RFC 8252 §7.3): anything else would hand the login code to a third party.
   */
  checkReturnTo(raw: string | null): string | null {
    if (raw === null || raw === '') return null;
    let u: URL;
    try {
      u = new URL(raw);
    } catch {
      throw invalidParameter('return_to: must be an absolute URL');
    }
    const own = new URL(this.d.publicUrl());
    const loopback = u.protocol === 'http:' && ['127.0.0.1', 'localhost', '[::1]'].includes(u.hostname);
    if (u.origin !== own.origin && !loopback) throw invalidParameter(`return_to: must be on ${own.origin} or a loopback address (http://127.0.0.1:PORT/...)`);
    if (u.username || u.password) throw invalidParameter('return_to: must not carry credentials');
    u.hash = '';
    return u.toString();
  }

  /** The authorization request: where to send the browser, and the binding cookie to set. */
  async start(providerId: string, returnTo: string | null): Promise<{ location: string; cookieName: string; binding: string; maxAgeS: number }> {
    const p = this.provider(providerId);
    const ret = this.checkReturnTo(returnTo);
    const disc = await this.discover(p);
    const state = oidc.randomState();
    const nonce = oidc.randomNonce();
    const verifier = oidc.randomPKCECodeVerifier();
    const binding = randomBytes(32).toString('base64url');
    const now = this.now();
    await this.d.store.insertOidcState({ stateHash: sha256Hex(state), providerId: p.id, nonce, codeVerifier: verifier, bindingHash: sha256Hex(binding), returnTo: ret, expiresAt: new Date(now.getTime() + OIDC_STATE_TTL_S * 1000), now });
    const url = oidc.buildAuthorizationUrl(disc.cfg, {
      redirect_uri: this.redirectUri(p),
      scope: [...new Set(['openid', ...p.scopes])].join(' '),
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state,
      nonce,
    });
    return { location: url.href, cookieName: bindingCookieName(state), binding, maxAgeS: OIDC_STATE_TTL_S };
  }

  /**
   * The authorization response. rawQuery is the callback's query string as received; cookies the
   * request's Cookie header. Throws AppErrors (400 state problems, 401 token validation); the
   * state row is consumed either way, so a response is never processed twice.
   */
  async callback(providerId: string, rawQuery: string, cookies: string | undefined, origin: { requestId: string; ip: string }): Promise<CallbackResult> {
    const p = this.provider(providerId);
    const params = new URLSearchParams(rawQuery);
    const state = params.get('state');
    if (!state) throw badRequest('oidc_state_invalid', 'the authorization response has no state');
    const row = await this.d.store.takeOidcState(sha256Hex(state));
    if (!row || row.provider_id !== p.id) throw badRequest('oidc_state_invalid', 'unknown or already used login state; start the login again');
    const binding = readCookie(cookies, bindingCookieName(state));
    if (!binding || !safeEqual(sha256Hex(binding), row.binding_hash)) throw badRequest('oidc_state_invalid', 'this login was started in another browser (the binding cookie is missing or does not match); start the login again');
    if (row.expires_at.getTime() <= this.now().getTime()) throw badRequest('oidc_state_expired', 'the login took too long; start it again');
    try {
      return await this.complete(p, state, row, rawQuery, origin);
    } catch (e) {
      // the browser goes back to where the login started, with the error code
      if (row.return_to && e instanceof AppError) throw new OidcFailure(e, row.return_to);
      throw e;
    }
  }

  private async complete(p: OidcProviderConfig, state: string, row: { nonce: string; code_verifier: string; return_to: string | null }, rawQuery: string, origin: { requestId: string; ip: string }): Promise<CallbackResult> {
    const params = new URLSearchParams(rawQuery);
    const providerError = params.get('error');
    if (providerError) throw sso('forbidden', 'oidc_denied', `the provider refused the login: ${providerError.slice(0, 100)}`);

    const disc = await this.discover(p);
    const current = new URL(`${this.redirectUri(p)}?${rawQuery}`);
    let tokens: Awaited<ReturnType<typeof oidc.authorizationCodeGrant>>;
    try {
      tokens = await oidc.authorizationCodeGrant(disc.cfg, current, { pkceCodeVerifier: row.code_verifier, expectedState: state, expectedNonce: row.nonce, idTokenExpected: true });
    } catch (e) {
      this.d.logger.warn({ provider: p.id, err_message: (e as Error).message, code: (e as { code?: string }).code }, 'oidc code exchange or ID token check failed');
      // oauth4webapi names the failed ID token claim in the cause (nonce, aud, iss, ...)
      const claim = failedClaim(e);
      throw sso('unauthorized', 'oidc_login_failed', `single sign-on failed: ${(e as Error).message}${typeof claim === 'string' ? ` (ID token claim ${claim})` : ''}`.slice(0, 300));
    }
    const idToken = tokens.id_token;
    if (!idToken) throw sso('unauthorized', 'oidc_login_failed', 'the provider returned no ID token');
    // the ID token's signature, against the provider's published keys (jose), and iss/aud/nonce once more
    let claims: JWTPayload;
    try {
      ({ payload: claims } = await jwtVerify(idToken, disc.jwks, { issuer: disc.issuer, audience: p.client_id, algorithms: disc.algorithms, clockTolerance: 60 }));
    } catch (e) {
      this.d.logger.warn({ provider: p.id, err_message: (e as Error).message }, 'oidc ID token verification failed');
      throw sso('unauthorized', 'oidc_id_token_invalid', `the ID token is not valid: ${(e as Error).message}`.slice(0, 300));
    }
    if (claims.nonce !== row.nonce) throw sso('unauthorized', 'oidc_id_token_invalid', 'the ID token nonce does not match');
    if (typeof claims.sub !== 'string' || claims.sub === '') throw sso('unauthorized', 'oidc_id_token_invalid', 'the ID token has no subject');
    // userinfo (when offered) completes the profile: some providers keep email and groups out of the ID token
    let profile: Record<string, unknown> = { ...claims };
    const meta = disc.cfg.serverMetadata();
    if (meta.userinfo_endpoint && tokens.access_token) {
      try {
        const info = await oidc.fetchUserInfo(disc.cfg, tokens.access_token, claims.sub);
        profile = { ...info, ...claims };
      } catch (e) {
        this.d.logger.warn({ provider: p.id, err_message: (e as Error).message }, 'oidc userinfo failed; using the ID token claims only');
      }
    }
    const r = await this.resolveUser(p, claims.sub, profile, origin);
    const code = randomBytes(32).toString('base64url');
    const now = this.now();
    await this.d.store.insertLoginCode(this.d.store.q, { codeHash: sha256Hex(code), userId: r.userId, providerId: p.id, expiresAt: new Date(now.getTime() + OIDC_CODE_TTL_S * 1000), now });
    return { userId: r.userId, code, returnTo: row.return_to, created: r.created };
  }

  /** Finds, links or creates the user, and applies the group mapping, in one transaction. */
  private async resolveUser(p: OidcProviderConfig, subject: string, profile: Record<string, unknown>, origin: { requestId: string; ip: string }): Promise<{ userId: string; created: boolean }> {
    const c = this.d.config;
    const email = typeof profile.email === 'string' ? profile.email.trim() : '';
    const emailVerified = profile.email_verified === true || profile.email_verified === 'true';
    const now = this.now();
    const grants: Array<{ team: string; role: 'admin' | 'member' }> = groupGrants(p, profile);
    const changed: string[] = [];
    const out = await this.d.store.tx(async (q) => {
      let user: UserRow | null = await this.d.store.userByIdentity(q, p.id, subject);
      let created = false;
      if (!user) {
        if (!email || email.length > 254 || !email.includes('@')) throw badRequest('oidc_email_missing', 'the provider did not share an email address (add the email scope / claim)');
        const existing = await this.d.store.userByEmailIn(q, normEmail(email));
        if (existing) {
          if (!p.link_verified_email) throw conflict('oidc_account_exists', 'an account with this email address exists; sign in with its password (linking by email is off for this provider)');
          if (!emailVerified) throw conflict('oidc_account_exists', 'an account with this email address exists and the provider does not say the email is verified');
          user = existing;
        } else {
          if (!p.create_users) throw forbidden('oidc_user_unknown', 'no account is linked to this identity and this provider does not create accounts');
          if (c.quotas.maxUsers > 0) {
            await this.d.store.lock(q, 'users');
            if ((await this.d.store.countUsers(q)) >= c.quotas.maxUsers) throw forbidden('quota_exceeded', `max_users quota reached (${c.quotas.maxUsers})`);
          }
          const first = str(profile.given_name) || str(profile.name).split(' ')[0] || email.split('@')[0] || 'user';
          const last = str(profile.family_name) || str(profile.name).split(' ').slice(1).join(' ');
          const displayName = (str(profile.name) || `${first} ${last}`.trim() || email).slice(0, 255);
          const userId = uuidv7();
          // no password: password login never matches this hash (a reset can set one later)
          const ok = await this.d.store.insertUser(q, { id: userId, email, emailNorm: normEmail(email), passwordHash: '', firstName: first.slice(0, 100), lastName: last.slice(0, 100), displayName, now });
          if (!ok) throw conflict('oidc_account_exists', 'an account with this email address was just created; try again');
          if (c.GANTRY_AUTO_TEAM) await this.d.store.insertTeam(q, { id: uuidv7(), displayName: `${displayName}'s team`.slice(0, 255), ownerId: userId, isPersonal: true, now });
          user = (await this.d.store.userByEmailIn(q, normEmail(email))) as UserRow;
          created = true;
        }
        if (emailVerified) await this.d.store.markEmailVerified(user.id, now, q);
      }
      await this.d.store.linkIdentity(q, { providerId: p.id, subject, userId: user.id, email: email || null, now });
      // group claim -> team roles: add, or raise member -> admin; never demote, never touch an owner
      const actor: AuditActor = { kind: 'user', userId: user.id, credentialId: null, requestId: origin.requestId, ip: origin.ip || null };
      for (const g of grants) {
        if (!(await this.d.store.liveTeam(q, g.team))) {
          this.d.logger.warn({ provider: p.id, team_id: g.team }, 'oidc group mapping names a team that does not exist');
          continue;
        }
        const role = await this.d.store.memberRole(g.team, user.id, q);
        let did = false;
        if (role === null) did = await this.d.store.addMember(q, g.team, user.id, g.role, now);
        else if (role === 'member' && g.role === 'admin') did = await this.d.store.raiseMemberRole(q, g.team, user.id, 'admin');
        if (did) {
          changed.push(g.team);
          await recorderOn(q, { actor, teamId: g.team, action: 'member.sso_grant', targetType: 'member', targetId: user.id, details: { provider: p.id, member_role: g.role, previous_role: role } })();
        }
      }
      return { userId: user.id, created };
    });
    for (const teamId of changed) await this.d.invalidation.publish({ type: 'membership', teamId, userId: out.userId });
    return out;
  }

  /** The one-time login code for the token pair (once). */
  async exchange(code: string): Promise<TokenPair> {
    const userId = await this.d.store.consumeLoginCode(sha256Hex(code), this.now());
    if (!userId) throw unauthorized('oidc_code_invalid', 'the login code is invalid, expired or already used');
    return this.d.identity.sessionFor(userId);
  }
}

/** The ID token claim an openid-client / oauth4webapi error names (somewhere in its cause chain). */
function failedClaim(e: unknown): string | null {
  let c: unknown = e;
  for (let i = 0; i < 4 && c && typeof c === 'object'; i++) {
    const claim = (c as { claim?: unknown }).claim;
    if (typeof claim === 'string') return claim;
    c = (c as { cause?: unknown }).cause;
  }
  return null;
}

const str = (v: unknown): string => (typeof v === 'string' ? v.trim() : '');

/** The team grants a profile's groups map to (unknown groups ignored). */
export function groupGrants(p: OidcProviderConfig, profile: Record<string, unknown>): Array<{ team: string; role: 'admin' | 'member' }> {
  const m = p.group_mapping;
  if (!m) return [];
  const raw = profile[m.claim];
  const groups = Array.isArray(raw) ? raw.filter((g): g is string => typeof g === 'string') : typeof raw === 'string' ? [raw] : [];
  // the strongest role per team
  const best = new Map<string, 'admin' | 'member'>();
  for (const g of groups) {
    const v = Object.prototype.hasOwnProperty.call(m.map, g) ? m.map[g] : undefined;
    if (!v) continue;
    for (const e of Array.isArray(v) ? v : [v]) {
      const team = e.team.toLowerCase();
      if (best.get(team) !== 'admin') best.set(team, e.role);
    }
  }
  return [...best].map(([team, role]) => ({ team, role }));
}

function readCookie(header: string | undefined, name: string): string | null {
  if (!header) return null;
  for (const part of header.split(/;\s*/)) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return null;
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
