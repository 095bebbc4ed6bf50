import { randomBytes } from 'node:crypto';
import type { HttpClient } from './node.js';
import type { GantryNode } from '../../src/main.js';
import type { KeyObject } from 'node:crypto';
import type { Database } from '../../src/persistence/db.js';

/** A registered, logged-in user; teamId is the personal team (undefined when GANTRY_AUTO_TEAM=false). */
export interface TestUser {
  userId: string;
  email: string;
  password: string;
  accessToken: string;
  refreshToken: string;
  teamId: string;
}

export interface RegisterOptions {
  email?: string;
  password?: string;
  firstName?: string;
  lastName?: string;
}

function must(ok: boolean, what: string, r: { status: number; text: string }): void {
  if (!ok) throw new Error(`${what} failed: ${r.status} ${r.text}`);
}

/** POST /auth/register then /auth/login, and reads the personal team from /users/me. */
export async function registerUser(http: HttpClient, opts: RegisterOptions = {}): Promise<TestUser> {
  const email = opts.email ?? `user-${randomBytes(6).toString('hex')}@example.test`;
  const password = opts.password ?? `pw-${randomBytes(8).toString('hex')}`;
  const reg = await http.post('/auth/register', { email_address: email, password, first_name: opts.firstName ?? 'Test', last_name: opts.lastName ?? 'User' });
  must(reg.status === 200, 'register', reg);
  const tokens = await login(http, email, password);
  const me = await http.get('/users/me', { token: tokens.accessToken });
  must(me.status === 200, 'GET /users/me', me);
  return { userId: reg.body.id, email, password, ...tokens, teamId: me.body.team_list[0]?.id };
}

export async function login(http: HttpClient, email: string, password: string): Promise<{ accessToken: string; refreshToken: string }> {
  const r = await http.post('/auth/login', { email_address: email, password });
  must(r.status === 200, 'login', r);
  return { accessToken: r.body.access_token, refreshToken: r.body.refresh_token };
}

/** Creates an sk- (integration) or ak- (agent) credential in the user's team (opts.teamId overrides). */
export async function createCredential(
  http: HttpClient,
  user: { accessToken: string; teamId: string },
  type: 'integration' | 'agent',
  opts: { teamId?: string; displayName?: string; expiresInDays?: number } = {},
): Promise<{ id: string; value: string; prefix: string }> {
  const body: Record<string, unknown> = { credential_type: type, display_name: opts.displayName ?? `${type} ${randomBytes(3).toString('hex')}` };
  if (opts.expiresInDays !== undefined) body.expires_in_days = opts.expiresInDays;
  const r = await http.post('/credentials', body, { token: user.accessToken, team: opts.teamId ?? user.teamId });
  must(r.status === 200, 'POST /credentials', r);
  return { id: r.body.id, value: r.body.credential_value, prefix: r.body.credential_prefix };
}

export interface PairedDevice {
  pairingId: string;
  deviceCredential: string;
  agentCredential: string;
  teamId: string;
}

/** Runs the whole pairing flow (start, confirm with the user's JWT, one poll) and returns the dk- and ak-. */
export async function pairDevice(http: HttpClient, user: { accessToken: string; teamId: string }, opts: { teamId?: string; deviceName?: string } = {}): Promise<PairedDevice> {
  const start = await http.post('/desktop/pair/start', { device_name: opts.deviceName ?? 'test desktop' });
  must(start.status === 200, 'pair start', start);
  const confirm = await http.post('/desktop/pair/confirm', { user_code: start.body.user_code }, { token: user.accessToken, team: opts.teamId ?? user.teamId });
  must(confirm.status === 200, 'pair confirm', confirm);
  const poll = await http.post('/desktop/pair/poll', { pairing_id: start.body.pairing_id, poll_secret: start.body.poll_secret });
  must(poll.status === 200 && poll.body.pairing_status === 'confirmed', 'pair poll', poll);
  return { pairingId: start.body.pairing_id, deviceCredential: poll.body.device_credential, agentCredential: poll.body.agent_credential, teamId: poll.body.team_id };
}

export interface OutboxEmail {
  id: string;
  email_kind: string;
  to_address: string;
  subject: string;
  body_text: string;
  created_at: Date;
}

/** Test hook: the email outbox (newest first), optionally for one address and kind. */
export async function readOutbox(node: GantryNode, to?: string, kind?: string): Promise<OutboxEmail[]> {
  const where: string[] = [];
  const params: unknown[] = [];
  if (to) {
    where.push('lower(to_address) = lower(?)');
    params.push(to);
  }
  if (kind) {
    where.push('email_kind = ?');
    params.push(kind);
  }
  return node.db.execute<OutboxEmail>(`select * from email_outbox ${where.length ? `where ${where.join(' and ')}` : ''} order by created_at desc, id desc`, params);
}

/** The token of the newest email of that kind to that address (verification, reset or invitation). */
export async function emailToken(node: GantryNode, to: string, kind: 'email_verification' | 'password_reset' | 'invitation'): Promise<string> {
  const m = (await readOutbox(node, to, kind))[0];
  if (!m) throw new Error(`no ${kind} email to ${to}`);
  const t = /token=([0-9A-Za-z]+)/.exec(m.body_text)?.[1];
  if (!t) throw new Error(`no token in ${kind} email`);
  return t;
}

/** Invites `member` into `owner`'s team with a role and accepts it with the member's session. */
export async function addMember(http: HttpClient, node: GantryNode, owner: { accessToken: string; teamId: string }, member: TestUser, role: 'admin' | 'member' = 'member', teamId = owner.teamId): Promise<void> {
  const inv = await http.post('/teams/current/invitations', { email_address: member.email, member_role: role }, { token: owner.accessToken, team: teamId });
  must(inv.status === 200, 'invite', inv);
  const token = await emailToken(node, member.email, 'invitation');
  const acc = await http.post('/invitations/accept', { invitation_token: token }, { token: member.accessToken });
  must(acc.status === 200, 'accept invitation', acc);
}

/** The node's current token signing key (kept in PostgreSQL, encrypted with its deployment secret): tests forge tokens with it. */
export async function nodeSigningKey(t: { node: { db: Database; config: { GANTRY_SECRET_KEY?: string | undefined } }; dataDir: string }): Promise<KeyObject> {
  const { PgSigningKeys, deploymentSecret } = await import('../../src/identity/signing-keys.js');
  const { createLogger } = await import('../../src/shared/logger.js');
  const logger = createLogger('silent');
  const ring = await PgSigningKeys.open({ db: t.node.db, secret: deploymentSecret(t.node.config.GANTRY_SECRET_KEY, t.dataDir, logger), dataDir: t.dataDir, rotateDays: 0, accessTokenTtlS: 900, logger });
  return ring.active().privateKey;
}
