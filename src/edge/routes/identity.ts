import { auditOf, parseBody, principalOf, teamPrincipalOf, uuidParam } from '../params.js';
import { z } from 'zod';
import type { RouteDef, TeamCtx } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { parsePage } from '../../shared/pagination.js';
import type { IdentityService } from '../../identity/service.js';

/** Parses a JSON body with a strict zod schema; a failure is a 400 naming the field. */



const email = z.email().max(254);
const password = z.string().min(10, 'must be at least 10 characters').max(256);
const name = z.string().trim().min(1).max(100);
const token = z.string().min(1).max(512);

const S = {
  register: z.strictObject({ email_address: email, password, first_name: name, last_name: name, display_name: z.string().trim().min(1).max(255).optional() }),
  login: z.strictObject({ email_address: z.string().min(1).max(254), password: z.string().min(1).max(256) }),
  refresh: z.strictObject({ refresh_token: token }),
  forgot: z.strictObject({ email_address: email }),
  reset: z.strictObject({ reset_token: token, new_password: password }),
  verify: z.strictObject({ verification_token: token }),
  pairStart: z.strictObject({ device_name: z.string().trim().min(1).max(255) }),
  pairConfirm: z.strictObject({ user_code: z.string().min(1).max(32) }),
  pairPoll: z.strictObject({ pairing_id: z.uuid(), poll_secret: token }),
  credential: z.strictObject({
    credential_type: z.enum(['integration', 'agent']),
    display_name: z.string().trim().min(1).max(255),
    expires_in_days: z.number().int().min(1).max(365).nullish(),
  }),
};

const PUBLIC: RouteAuth = { kinds: 'public' };
const USER: RouteAuth = { kinds: ['user', 'device'] };
const JWT_TEAM: RouteAuth = { kinds: ['user'], team: true };

/** Accounts, sessions, device pairing, credentials and the user profile. */
export function identityRoutes(svc: IdentityService): RouteDef[] {
  return [
    {
      method: 'POST',
      path: '/auth/register',
      auth: PUBLIC,
      handler: async (c) => {
        svc.rateLimit('register', c.ip);
        return svc.register(parseBody(S.register, c.body));
      },
    },
    {
      method: 'POST',
      path: '/auth/login',
      auth: PUBLIC,
      handler: async (c) => {
        svc.rateLimit('login', c.ip);
        return svc.login(parseBody(S.login, c.body));
      },
    },
    {
      method: 'POST',
      path: '/auth/refresh',
      auth: PUBLIC,
      handler: async (c) => {
        svc.rateLimit('refresh', c.ip);
        return svc.refresh(parseBody(S.refresh, c.body));
      },
    },
    {
      method: 'POST',
      path: '/auth/logout',
      auth: USER,
      handler: async (c) => {
        await svc.logout(principalOf(c), parseBody(S.refresh, c.body));
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/auth/password/forgot',
      auth: PUBLIC,
      handler: async (c) => {
        svc.rateLimit('forgot', c.ip);
        await svc.forgotPassword(parseBody(S.forgot, c.body));
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/auth/password/reset',
      auth: PUBLIC,
      handler: async (c) => {
        svc.rateLimit('forgot', c.ip);
        await svc.resetPassword(parseBody(S.reset, c.body));
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/auth/email/verify',
      auth: PUBLIC,
      handler: async (c) => {
        await svc.verifyEmail(parseBody(S.verify, c.body));
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/auth/device/revoke',
      auth: { kinds: ['device'] },
      handler: async (c) => {
        await svc.deviceRevoke(principalOf(c), auditOf(c, 'credential.revoke', 'credential', principalOf(c).credentialId ?? null));
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/desktop/pair/start',
      auth: PUBLIC,
      handler: async (c) => {
        svc.rateLimit('pair_start', c.ip);
        return svc.pairStart(parseBody(S.pairStart, c.body));
      },
    },
    {
      method: 'POST',
      path: '/desktop/pair/confirm',
      auth: JWT_TEAM,
      handler: async (c) => {
        svc.rateLimit('pair_confirm', c.ip);
        await svc.pairConfirm(teamPrincipalOf(c), parseBody(S.pairConfirm, c.body), auditOf(c, 'device_pairing.confirm', 'device_pairing'));
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/desktop/pair/poll',
      auth: PUBLIC,
      handler: async (c) => svc.pairPoll(parseBody(S.pairPoll, c.body)),
    },
    {
      method: 'POST',
      path: '/credentials',
      auth: JWT_TEAM,
      handler: async (c) => {
        const b = parseBody(S.credential, c.body);
        return svc.createCredential(teamPrincipalOf(c), { credential_type: b.credential_type, display_name: b.display_name, expires_in_days: b.expires_in_days ?? undefined }, auditOf(c, 'credential.create', 'credential'));
      },
    },
    { method: 'GET', path: '/credentials', auth: JWT_TEAM, handler: async (c) => svc.listCredentials(teamPrincipalOf(c), parsePage(c.query)) },
    {
      method: 'DELETE',
      path: '/credentials/{credentialId}',
      auth: JWT_TEAM,
      handler: async (c) => {
        const id = uuidParam(c, 'credentialId');
        await svc.revokeCredential(teamPrincipalOf(c), id, auditOf(c, 'credential.revoke', 'credential', id));
        return { is_success: true };
      },
    },
    { method: 'GET', path: '/users/me', auth: USER, handler: async (c) => svc.me(principalOf(c)) },
  ];
}

/**
 * Test/diagnostic route (mounted with GANTRY_DEBUG_ROUTES only): a runtime-style endpoint (J, S, D,
 * team-scoped) that echoes the resolved principal.
 */
export function identityDebugRoutes(): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/_debug/r/whoami',
      auth: { kinds: ['user', 'integration', 'device'], team: true },
      tag: 'runtime',
      handler: async (c) => {
        const p = (c as TeamCtx).principal;
        return { kind: p.kind, user_id: p.userId ?? null, team_id: p.teamId, member_role: p.role ?? null, credential_id: p.credentialId ?? null };
      },
    },
  ];
}
