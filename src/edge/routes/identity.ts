import { auditOf, parseBody, principalOf, teamPrincipalOf, uuidParam } from '../params.js';
import { z } from 'zod';
import type { RouteDef, TeamCtx } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { parsePage } from '../../shared/pagination.js';
import type { AccountUseCases } from '../../app/identity.js';
import * as D from '../openapi/schemas.js';

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
  pairStart: z.strictObject({
    device_name: z.string().trim().min(1).max(255),
    agent_credential: z.boolean().optional().describe('an extension: false = the confirmed pairing mints only the dk- (a CLI runs no agent); default true'),
  }),
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
/** Team-scoped management: the JWT, or a dk- that behaves as its user's JWT (the contract). */
const USER_TEAM: RouteAuth = { kinds: ['user', 'device'], team: true };

/** Accounts, sessions, device pairing, credentials and the user profile. The use cases are src/app/identity.ts. */
export function identityRoutes(svc: AccountUseCases): RouteDef[] {
  return [
    {
      method: 'POST',
      path: '/auth/register',
      doc: { summary: 'Register an account (creates the personal team)', tags: ['auth'], body: S.register, responses: { 200: D.IdResult }, errors: [403, 409, 429] },
      auth: PUBLIC,
      handler: async (c) => svc.register(c.ip, parseBody(S.register, c.body)),
    },
    {
      method: 'POST',
      path: '/auth/login',
      doc: { summary: 'Log in', tags: ['auth'], body: S.login, responses: { 200: D.TokenPair }, errors: [401, 429] },
      auth: PUBLIC,
      handler: async (c) => svc.login(c.ip, parseBody(S.login, c.body)),
    },
    {
      method: 'POST',
      path: '/auth/refresh',
      doc: { summary: 'Rotate a refresh token', tags: ['auth'], body: S.refresh, responses: { 200: D.TokenPair }, errors: [401, 429] },
      auth: PUBLIC,
      handler: async (c) => svc.refresh(c.ip, parseBody(S.refresh, c.body)),
    },
    {
      method: 'POST',
      path: '/auth/logout',
      doc: { summary: 'Log out (revokes the refresh token family)', tags: ['auth'], body: S.refresh, responses: { 200: D.Success } },
      auth: USER,
      handler: async (c) => svc.logout(principalOf(c), parseBody(S.refresh, c.body)),
    },
    {
      method: 'POST',
      path: '/auth/password/forgot',
      doc: { summary: 'Request a password reset email', tags: ['auth'], body: S.forgot, responses: { 200: D.Success }, errors: [429] },
      auth: PUBLIC,
      handler: async (c) => svc.forgotPassword(c.ip, parseBody(S.forgot, c.body)),
    },
    {
      method: 'POST',
      path: '/auth/password/reset',
      doc: { summary: 'Reset a password with the emailed token', tags: ['auth'], body: S.reset, responses: { 200: D.Success }, errors: [429] },
      auth: PUBLIC,
      handler: async (c) => svc.resetPassword(c.ip, parseBody(S.reset, c.body)),
    },
    {
      method: 'POST',
      path: '/auth/email/verify',
      doc: { summary: 'Verify an email address', tags: ['auth'], body: S.verify, responses: { 200: D.Success } },
      auth: PUBLIC,
      handler: async (c) => svc.verifyEmail(parseBody(S.verify, c.body)),
    },
    {
      method: 'POST',
      path: '/auth/device/revoke',
      doc: { summary: 'Revoke the calling dk- credential (and agent credentials minted with it)', tags: ['auth'], responses: { 200: D.Success } },
      auth: { kinds: ['device'] },
      handler: async (c) => svc.deviceRevoke(principalOf(c), auditOf(c, 'credential.revoke', 'credential', principalOf(c).credentialId ?? null)),
    },
    {
      method: 'POST',
      path: '/desktop/pair/start',
      doc: { summary: 'Start device pairing (anonymous)', tags: ['auth'], body: S.pairStart, responses: { 200: D.PairStart }, errors: [429] },
      auth: PUBLIC,
      handler: async (c) => svc.pairStart(c.ip, parseBody(S.pairStart, c.body)),
    },
    {
      method: 'POST',
      path: '/desktop/pair/confirm',
      doc: { summary: 'Confirm a pairing code (user JWT + X-Team-ID)', tags: ['auth'], body: S.pairConfirm, responses: { 200: D.Success }, errors: [409, 429] },
      auth: JWT_TEAM,
      handler: async (c) => svc.pairConfirm(c.ip, teamPrincipalOf(c), parseBody(S.pairConfirm, c.body), auditOf(c, 'device_pairing.confirm', 'device_pairing')),
    },
    {
      method: 'POST',
      path: '/desktop/pair/poll',
      doc: { summary: 'Poll a pairing (anonymous); the credential is returned once', tags: ['auth'], body: S.pairPoll, responses: { 200: D.PairPoll } },
      auth: PUBLIC,
      handler: async (c) => svc.pairPoll(parseBody(S.pairPoll, c.body)),
    },
    {
      method: 'POST',
      path: '/credentials',
      doc: { summary: 'Create an sk- or ak- credential (value shown once)', tags: ['credentials'], body: S.credential, responses: { 200: D.CredentialCreated } },
      auth: USER_TEAM,
      handler: async (c) => svc.createCredential(teamPrincipalOf(c), parseBody(S.credential, c.body), auditOf(c, 'credential.create', 'credential')),
    },
    { method: 'GET', path: '/credentials', auth: USER_TEAM, doc: { summary: 'List credentials (never the value)', tags: ['credentials'], paged: true, responses: { 200: D.pageOf('credential_list', D.Credential) } }, handler: async (c) => svc.listCredentials(teamPrincipalOf(c), parsePage(c.query)) },
    {
      method: 'DELETE',
      path: '/credentials/{credentialId}',
      doc: { summary: 'Revoke a credential', tags: ['credentials'], responses: { 200: D.Success } },
      auth: USER_TEAM,
      handler: async (c) => {
        const id = uuidParam(c, 'credentialId');
        return svc.revokeCredential(teamPrincipalOf(c), id, auditOf(c, 'credential.revoke', 'credential', id));
      },
    },
    { method: 'GET', path: '/users/me', auth: USER, doc: { summary: 'The caller\'s profile, teams and feature flags', tags: ['auth'], responses: { 200: D.UserProfile } }, handler: async (c) => svc.me(principalOf(c)) },
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
      doc: { hidden: true, summary: 'debug', tags: ['debug'], responses: {} },
      auth: { kinds: ['user', 'integration', 'device'], team: true },
      tag: 'runtime',
      handler: async (c) => {
        const p = (c as TeamCtx).principal;
        return { kind: p.kind, user_id: p.userId ?? null, team_id: p.teamId, member_role: p.role ?? null, credential_id: p.credentialId ?? null };
      },
    },
  ];
}
