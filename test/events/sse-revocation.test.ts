/**
 * Open SSE streams end with what let them open (issue 29, point 2), over real HTTP against a real
 * node: a stream on a task that stays waiting (no agent) ends, with a final `: stream ended: <why>`
 * comment, when its sk- is revoked, its login session ends, its user resets the password (JWT and
 * dk- streams), its user leaves the team, or the team is deleted; streams of other callers stay
 * open. Before the fix such a stream kept delivering until the task ended.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, pairDevice, emailToken, addMember } from '../helpers/identity.js';
import { submitTask } from '../helpers/tasks.js';
import { SseClient } from './helpers.js';
import { SseHub, type SseSink } from '../../src/events/sse.js';
import { streamEndFor } from '../../src/events/stream-revocation.js';
import { createLogger } from '../../src/shared/logger.js';

let t: TestNode;

before(async () => {
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'sserevoke');
});
after(async () => {
  await t.stop();
});

const url = (taskId: string): string => `${t.baseUrl}/r/tasks/${taskId}/events`;
const jwt = (u: { accessToken: string }, teamId: string): Record<string, string> => ({ authorization: `Bearer ${u.accessToken}`, 'x-team-id': teamId });
const bearer = (v: string): Record<string, string> => ({ authorization: `Bearer ${v}` });

/** A stream on a task that stays waiting: it is open and has sent the current status. */
async function open(taskId: string, headers: Record<string, string>): Promise<SseClient> {
  const s = await SseClient.connect(url(taskId), headers);
  assert.equal(s.status, 200, s.body);
  await s.until((c) => c.messages.length >= 1, 10_000, 'the current status');
  return s;
}

async function endedWith(s: SseClient, reason: string, what: string): Promise<void> {
  await s.until((c) => c.ended, 10_000, `${what}: the stream ends`);
  assert.ok(s.comments.includes(`stream ended: ${reason}`), `${what}: final comment names ${reason}, got ${JSON.stringify(s.comments)}`);
  assert.ok(!s.messages.some((m) => ['completed', 'failed', 'cancelled'].includes(m.event)), `${what}: ended by the revocation, not by the task`);
}

function stillOpen(s: SseClient, what: string): void {
  assert.equal(s.ended, false, `${what}: still open`);
}

test('revoking an sk- ends the streams it opened (final comment credential_revoked); other streams stay open', async () => {
  const u = await registerUser(t.http);
  const sk = await createCredential(t.http, u, 'integration');
  const other = await createCredential(t.http, u, 'integration');
  const id = await submitTask(t.node, u.teamId);
  const a = await open(id, bearer(sk.value));
  const b = await open(id, bearer(sk.value));
  const c = await open(id, bearer(other.value));
  const d = await open(id, jwt(u, u.teamId));
  const del = await t.http.del(`/credentials/${sk.id}`, { token: u.accessToken, team: u.teamId });
  assert.equal(del.status, 200, del.text);
  await endedWith(a, 'credential_revoked', 'first sk- stream');
  await endedWith(b, 'credential_revoked', 'second sk- stream');
  // a keep-alive round would have shown them ended too: they are not
  stillOpen(c, 'another sk-');
  stillOpen(d, 'a JWT stream');
  for (const s of [c, d]) s.close();
});

test('logout ends the JWT streams of that session (session_ended); the same user\'s other login keeps its stream', async () => {
  const u = await registerUser(t.http);
  const second = await t.http.post('/auth/login', { email_address: u.email, password: u.password });
  assert.equal(second.status, 200);
  const id = await submitTask(t.node, u.teamId);
  const a = await open(id, jwt(u, u.teamId));
  const b = await open(id, jwt({ accessToken: second.body.access_token as string }, u.teamId));
  assert.equal((await t.http.post('/auth/logout', { refresh_token: u.refreshToken }, { token: u.accessToken })).status, 200);
  await endedWith(a, 'session_ended', 'stream of the logged-out session');
  stillOpen(b, 'stream of the other login');
  b.close();
});

test('a password reset ends the user\'s JWT streams and dk- streams; a new login streams again', async () => {
  const u = await registerUser(t.http);
  const dev = await pairDevice(t.http, u);
  const bystander = await registerUser(t.http);
  const id = await submitTask(t.node, u.teamId);
  const other = await submitTask(t.node, bystander.teamId);
  const a = await open(id, jwt(u, u.teamId));
  const b = await open(id, bearer(dev.deviceCredential));
  const c = await open(other, jwt(bystander, bystander.teamId));
  assert.equal((await t.http.post('/auth/password/forgot', { email_address: u.email })).status, 200);
  const token = await emailToken(t.node, u.email, 'password_reset');
  assert.equal((await t.http.post('/auth/password/reset', { reset_token: token, new_password: 'a brand new password' })).status, 200);
  await endedWith(a, 'session_revoked', 'JWT stream after reset');
  await endedWith(b, 'credential_revoked', 'dk- stream after reset');
  stillOpen(c, "another user's stream");
  // the new session is not caught by the reset (it was authenticated after it)
  const fresh = await t.http.post('/auth/login', { email_address: u.email, password: 'a brand new password' });
  assert.equal(fresh.status, 200);
  const d = await open(id, jwt({ accessToken: fresh.body.access_token as string }, u.teamId));
  stillOpen(d, 'stream of the new login');
  for (const s of [c, d]) s.close();
});

test('leaving the team ends the member\'s streams in it (membership_ended); a role change does not; team deletion ends every stream of the team', async () => {
  const owner = await registerUser(t.http);
  const member = await registerUser(t.http);
  await addMember(t.http, t.node, owner, member, 'admin');
  const id = await submitTask(t.node, owner.teamId);
  const m = await open(id, jwt(member, owner.teamId));
  const o = await open(id, jwt(owner, owner.teamId));
  // a role change keeps the membership: the stream stays (waits for the node's re-check to answer)
  const store = t.node.identity.store;
  const orig = store.memberRole.bind(store);
  const checks: Array<Promise<unknown>> = [];
  store.memberRole = (...a: Parameters<typeof orig>) => {
    const p = orig(...a);
    checks.push(p);
    return p;
  };
  try {
    const demote = await t.http.put(`/teams/current/members/${member.userId}`, { member_role: 'member' }, { token: owner.accessToken, team: owner.teamId });
    assert.equal(demote.status, 200, demote.text);
    assert.ok(checks.length >= 2, 'the membership of the open stream was re-checked');
    assert.equal(await checks.at(-1), 'member');
    await new Promise((r) => setImmediate(r));
  } finally {
    store.memberRole = orig;
  }
  stillOpen(m, 'member stream after a role change');

  const leave = await t.http.del(`/teams/current/members/${member.userId}`, { token: member.accessToken, team: owner.teamId });
  assert.equal(leave.status, 200, leave.text);
  await endedWith(m, 'membership_ended', 'stream of the member who left');
  stillOpen(o, "the owner's stream");

  // team deletion: every stream of the team, whatever opened it
  const team = await t.http.post('/teams', { display_name: 'doomed' }, { token: owner.accessToken });
  const teamId = team.body.id as string;
  const sk = await createCredential(t.http, owner, 'integration', { teamId });
  const tid = await submitTask(t.node, teamId);
  const x = await open(tid, bearer(sk.value));
  const y = await open(tid, jwt(owner, teamId));
  assert.equal((await t.http.del('/teams/current', { token: owner.accessToken, team: teamId })).status, 200);
  for (const [s, what] of [[x, 'sk- stream'], [y, 'owner stream']] as const) {
    await s.until((c) => c.ended, 10_000, `${what} of the deleted team ends`);
    assert.ok(s.comments.some((c) => c === 'stream ended: team_deleted' || c === 'stream ended: credential_revoked'), `${what}: ${JSON.stringify(s.comments)}`);
  }
  stillOpen(o, "the owner's stream in another team");
  o.close();
});

test('a stream still opening when its credential is revoked (authenticated before, registered after) ends as it goes live; one authenticated after does not', async () => {
  let letExist: () => void = () => undefined;
  const gate = new Promise<void>((r) => (letExist = r));
  const hub = new SseHub({
    source: {
      exists: async () => {
        await gate;
        return true;
      },
      eventsAfter: async () => [],
      current: async () => ({ transition: { id: 1, taskId: 'k', teamId: 'T', type: 'status', data: { status: 'waiting' }, createdAt: 0 }, progress: null }),
    },
    bus: { subscribeTask: () => () => undefined },
    logger: createLogger('silent'),
    maxStreamsPerTeam: 10,
    keepAliveMs: 60_000,
  });
  const sink = (): SseSink & { writes: string[]; ended: boolean } => {
    const r = {
      writes: [] as string[],
      aborted: false,
      ended: false,
      onAbort: () => undefined,
      writeHead: () => undefined,
      write: (x: string) => (r.writes.push(x), true),
      drained: async () => undefined,
      bufferedAmount: () => 0,
      end: () => void (r.ended = true),
      close: () => void (r.ended = true),
    };
    return r;
  };
  const before = sink();
  const beforeServed = hub.serve('T', 'k', null, before, hub.reserve('T'), { kind: 'integration', credentialId: 'c1', since: Date.now() - 1 });
  const end = streamEndFor({ type: 'credential', ids: ['c1'] });
  assert.ok(end);
  assert.equal(hub.endWhere(end.match, end.reason), 0, 'not registered yet');
  const after = sink();
  const afterServed = hub.serve('T', 'k', null, after, hub.reserve('T'), { kind: 'integration', credentialId: 'c1', since: Date.now() + 1 });
  letExist();
  await Promise.all([beforeServed, afterServed]);
  assert.equal(before.ended, true, 'the stream authenticated before the revocation ended');
  assert.equal(before.writes.at(-1), ': stream ended: credential_revoked\n\n');
  assert.equal(after.ended, false, 'a stream authenticated after it (a new check) stays');
  assert.equal(hub.openStreams('T'), 1);
  assert.equal(hub.revoked, 1);
});
