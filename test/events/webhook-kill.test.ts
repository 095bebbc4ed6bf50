import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Server } from 'node:https';
import pg from 'pg';
import { verify } from '@octokit/webhooks-methods';
import { childNodeSetup, serveChild } from '../helpers/child-node.js';
import { HttpClient } from '../helpers/node.js';
import { registerUser, createCredential } from '../helpers/identity.js';
import { spawnAgent, tinyGraph, waitFor, type AgentProcess } from '../agents/helpers.js';
import { makePki, Receiver } from './helpers.js';

/**
 * Issue 12: webhook deliveries survive a SIGKILL of the node (no graceful close, so no attempt is
 * given back). Two webhooks on the same task.completed event:
 *  - "leased": attempt 1 answers 503, attempt 2 is held open by the receiver, so the row is
 *    'delivering' under the dead node's lease when the node is killed;
 *  - "pending": attempts 1 and 2 answer 503, so the row is 'pending' with next_attempt_at +5 s.
 * A node restarted on the same database must not take the leased row while the lease holds, must
 * take it once the lease has passed (attempt 3), must send the pending retry (attempt 3), and the
 * receivers must see every attempt number exactly once.
 */
/** Attempt numbers (X-Webhook-Attempt) the receiver saw, in order. */
const attemptsSeen = (rx: Receiver): number[] => rx.received.map((r) => Number(r.headers['x-webhook-attempt']));

test('SIGKILL between webhook attempts: the leased row is retried after its lease by the new node, the pending retry is sent, every attempt delivered once', { timeout: 120_000 }, async () => {
  const pki = makePki();
  const { db, dataDir, httpPort, grpcPort, env } = await childNodeSetup('whkill', 'whkill', {
    GANTRY_OUTBOUND_ALLOWLIST: '127.0.0.1,::1,localhost',
    GANTRY_OUTBOUND_CA_FILE: pki.caFile,
    LOG_LEVEL: 'info',
  });
  const sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  // the leased receiver: 503, then hold attempt 2 open (never answered: the node dies waiting), then 200
  const leasedRx = await new Receiver(pki, () => Date.now()).start('127.0.0.1');
  const held: Array<() => void> = [];
  leasedRx.respond = (n) => (n === 0 ? 503 : 200);
  const pendingRx = await new Receiver(pki, () => Date.now()).start('localhost');
  pendingRx.respond = (n) => (n < 2 ? 503 : 200);
  // hold attempt 2 of the leased receiver: a raw listener in front of the Receiver's own
  const server = (leasedRx as unknown as { server: Server }).server;
  const original = server.listeners('request')[0] as (req: IncomingMessage, res: ServerResponse) => void;
  server.removeAllListeners('request');
  let leasedRequests = 0;
  server.on('request', (req, res) => {
    if (++leasedRequests !== 2) return original(req, res);
    // record it like the Receiver does, but never answer
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      leasedRx.received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now(), status: 0 });
      held.push(() => res.destroy());
    });
  });

  const agents: AgentProcess[] = [];
  let node = await serveChild(env);
  try {
    const http = new HttpClient(`http://127.0.0.1:${httpPort}/api/v1`);
    const user = await registerUser(http);
    const as = { token: user.accessToken, team: user.teamId };
    const hook = async (url: string): Promise<{ id: string; secret: string }> => {
      const r = await http.post('/webhooks', { display_name: 'kill', webhook_url: url, webhook_events: ['task.completed'] }, as);
      assert.equal(r.status, 200, r.text);
      const d = await http.get(`/webhooks/${r.body.id}`, as);
      return { id: r.body.id, secret: d.body.signing_secret };
    };
    const leased = await hook(leasedRx.url);
    const pending = await hook(pendingRx.url);
    const row = async (webhookId: string): Promise<Record<string, any>> => {
      const rows = (await sql.query('select *, lease_until > now() as lease_holds from webhook_deliveries where webhook_id = $1', [webhookId])).rows;
      assert.ok(rows.length <= 1, `one delivery per webhook: ${rows.length}`);
      return rows[0];
    };

    // one completed task on a real agent
    const ak = await createCredential(http, user, 'agent');
    const wf = await http.post('/workflows', { workflow_slug: `whkill-${Date.now()}`, display_name: 'whkill', workflow_json: tinyGraph(2), max_retries: 0 }, as);
    assert.equal(wf.status, 200, wf.text);
    const stateDir = mkdtempSync(join(tmpdir(), 'gantry-whkill-agent-'));
    agents.push(spawnAgent(['--server', `127.0.0.1:${grpcPort}`, '--credential', ak.value, '--executor', 'simulate', '--state-dir', stateDir, '--simulate-steps', '1', '--machine-id', 'whkill-box']));
    const run = await http.post(`/r/workflows/${wf.body.id}/run`, { parameters: {} }, as);
    assert.equal(run.status, 202, run.text);
    const taskId = run.body.task_id as string;

    // the leased row: attempt 2 is in flight (held by the receiver); the pending row: 2 failed attempts
    await leasedRx.waitFor(2, 60_000);
    await pendingRx.waitFor(2, 30_000);
    await waitFor('leased row delivering attempt 2', async () => {
      const r = await row(leased.id);
      return r.delivery_status === 'delivering' && Number(r.attempt) === 2 && r.lease_holds;
    });
    await waitFor('pending row waiting for attempt 3', async () => {
      const r = await row(pending.id);
      return r.delivery_status === 'pending' && Number(r.attempt) === 2;
    });
    const leaseUntil = new Date((await row(leased.id)).lease_until).getTime();

    node.child.kill('SIGKILL');
    await node.exit;
    for (const h of held.splice(0)) h();
    // the kill gave nothing back: the leased row is still the dead node's
    const afterKill = await row(leased.id);
    assert.equal(afterKill.delivery_status, 'delivering');
    assert.equal(Number(afterKill.attempt), 2);
    assert.equal(new Date(afterKill.lease_until).getTime(), leaseUntil);

    node = await serveChild(env);
    // the new node sends the pending retry (attempt 3) once it is due
    await pendingRx.waitFor(3, 30_000);
    await waitFor('pending delivery succeeded', async () => (await row(pending.id)).delivery_status === 'succeeded', 15_000);
    // the leased row is not taken while the lease holds (the pending retry above proves the new node's
    // dispatcher has run at least one claim since it started)
    const stillLeased = await row(leased.id);
    assert.equal(stillLeased.delivery_status, 'delivering', 'the new node took the attempt before the dead node lease ran out');
    assert.equal(Number(stillLeased.attempt), 2);
    assert.ok(stillLeased.lease_holds);
    assert.equal(leasedRx.received.length, 2);
    // the lease runs out (moved to the past instead of waiting the 60 s default): the new node takes
    // the row over on its next poll and sends attempt 3
    await sql.query(`update webhook_deliveries set lease_until = now() - interval '1 millisecond' where id = $1 and delivery_status = 'delivering' and attempt = 2`, [afterKill.id]);
    await leasedRx.waitFor(3, 30_000);
    await waitFor('leased delivery succeeded', async () => (await row(leased.id)).delivery_status === 'succeeded', 15_000);

    // PostgreSQL: three attempts each; the dead node's attempt 2 of the leased row left no log entry
    const l = await row(leased.id);
    assert.equal(Number(l.attempt), 3);
    assert.equal(l.response_code, 200);
    assert.deepEqual(
      l.attempt_log.map((a: any) => [a.attempt, a.response_code]),
      [
        [1, 503],
        [3, 200],
      ],
    );
    const p = await row(pending.id);
    assert.equal(Number(p.attempt), 3);
    assert.deepEqual(
      p.attempt_log.map((a: any) => [a.attempt, a.response_code]),
      [
        [1, 503],
        [2, 503],
        [3, 200],
      ],
    );
    // the receivers: each attempt number exactly once, one delivery id, the same signed body
    assert.deepEqual(attemptsSeen(leasedRx), [1, 2, 3]);
    assert.deepEqual(attemptsSeen(pendingRx), [1, 2, 3]);
    for (const [rx, h, id] of [
      [leasedRx, leased, l.id],
      [pendingRx, pending, p.id],
    ] as const) {
      for (const r of rx.received) {
        assert.equal(r.headers['x-webhook-delivery'], id);
        assert.equal(r.body, rx.received[0]!.body);
        assert.equal(await verify(h.secret, r.body, String(r.headers['x-webhook-signature-256'])), true);
      }
      assert.equal(JSON.parse(rx.received[0]!.body).task_id, taskId);
    }
    // still exactly one delivery per webhook (the restart re-scanned the task events without enqueueing again)
    const n = (await sql.query('select count(*)::int as n from webhook_deliveries where team_id = $1', [user.teamId])).rows[0].n;
    assert.equal(n, 2);
  } finally {
    for (const a of agents) a.kill('SIGKILL');
    for (const h of held.splice(0)) h();
    node.child.kill('SIGKILL');
    await node.exit;
    await leasedRx.stop();
    await pendingRx.stop();
    await sql.end();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
    pki.cleanup();
  }
});
