/**
 * The first WebSocket connections to a freshly started node stay open (issue 28). uWS's cork(), run
 * around an upgrade completed after an await, could mistake the new WebSocket for the HTTP response
 * it had been and shut it down right after open (uWebSockets #1929; src/edge/http.ts,
 * upgradeAfterAwait): the agent, or any client, saw close 1006 a millisecond after the handshake.
 * It struck the first connections of a fresh process, so each round starts a new node process
 * (`gantry serve`) on the same database and opens three agent WebSockets at once, as its first
 * connections, then closes them cleanly. With the upgrade corked again, 3 of 6 runs of this file
 * failed (one or two `closed 1006 after open`); with upgradeAfterAwait, 0 of 6. A failure that
 * depends on what memory holds cannot be forced every time: this test fails about half the time
 * on a regression, and every WebSocket test of the suite exercises the same path again.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import WebSocket from 'ws';
import { HttpClient, type TestNode } from '../helpers/node.js';
import { childNodeSetup, serveChild } from '../helpers/child-node.js';
import { setupTeam } from './helpers.js';

const ROUNDS = 4;
const CONCURRENT = 3;

/** Opens one agent WebSocket, holds it 100 ms, closes it: 'clean' when both sides closed with 1000. */
function openAndClose(url: string, ak: string): Promise<string> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${ak}` }, perMessageDeflate: false });
    let opened = false;
    let err = '';
    ws.on('error', (e) => (err = e.message));
    ws.on('unexpected-response', (_q, r) => {
      resolve(`HTTP ${r.statusCode} on the handshake`);
      ws.terminate();
    });
    ws.on('open', () => {
      opened = true;
      setTimeout(() => ws.close(1000), 100);
    });
    ws.on('close', (code) => resolve(code === 1000 ? 'clean' : `closed ${code}${opened ? ' after open' : ' before open'}${err ? ` (${err})` : ''}`));
  });
}

test('the first agent WebSockets to a fresh node process stay open until the client closes them', { timeout: 120_000 }, async () => {
  const { db, dataDir, httpPort, env } = await childNodeSetup('ws_first', 'wsfirst');
  let node = await serveChild(env);
  try {
    const s = await setupTeam({ http: new HttpClient(`http://127.0.0.1:${httpPort}/api/v1`) } as unknown as TestNode);
    const url = `ws://127.0.0.1:${httpPort}/api/v1/agents/connect`;
    const results: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      node.child.kill('SIGTERM');
      await node.exit;
      node = await serveChild(env);
      const r = await Promise.all(Array.from({ length: CONCURRENT }, () => openAndClose(url, s.ak.value)));
      results.push(...r.map((x) => `round ${round}: ${x}`));
    }
    assert.deepEqual(
      results.filter((x) => !x.endsWith(': clean')),
      [],
      'every first connection stayed open until the client closed it',
    );
  } finally {
    node.child.kill('SIGKILL');
    await node.exit;
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
