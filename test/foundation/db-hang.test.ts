/**
 * A hanging database is failed fast (issue 29, point 4). The node reaches this file's own database
 * through a TCP proxy that black-holes it (connections stay open, nothing passes, nothing is
 * refused): submits answer 503 `database_unavailable` with Retry-After within the configured bounds
 * (GANTRY_DB_STATEMENT_TIMEOUT_MS / GANTRY_DB_ACQUIRE_TIMEOUT_MS), well before a 10 s client
 * timeout, `/readyz` answers 503 within 1 s, and once the database answers again nothing answered
 * 503 was committed behind the client's back. Before the fix submits hung until the black hole
 * ended and were then committed (202 to a client long gone), and /readyz hung.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/shared/config.js';
import { createLogger } from '../../src/shared/logger.js';
import { startNode } from '../../src/main.js';
import { HttpClient, type TestNode } from '../helpers/node.js';
import { adminUrl, createTestDatabase } from '../helpers/pg.js';
import { PgProxy } from '../helpers/pg-proxy.js';
import { setupTeam, createWorkflow, tinyGraph, waitFor } from '../agents/helpers.js';

const BOUND_MS = 2000;

test('config: the database bounds default to 5 s (acquire and statement)', () => {
  const c = loadConfig({}, {});
  assert.equal(c.GANTRY_DB_ACQUIRE_TIMEOUT_MS, 5000);
  assert.equal(c.GANTRY_DB_STATEMENT_TIMEOUT_MS, 5000);
});

test('a black-holed PostgreSQL: submits answer 503 + Retry-After within the bounds, /readyz within 1 s, nothing answered 503 is committed later', { timeout: 60_000 }, async () => {
  const db = await createTestDatabase('dbhang');
  const admin = new URL(adminUrl());
  const proxy = new PgProxy(admin.hostname, Number(admin.port || 5432));
  await proxy.start();
  const url = new URL(db.url);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-hang-'));
  const config = loadConfig(
    {},
    {
      DATABASE_URL: url.toString(),
      GANTRY_DATA_DIR: dataDir,
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_HTTP_PORT: 0,
      GANTRY_GRPC_HOST: '127.0.0.1',
      GANTRY_GRPC_PORT: 0,
      GANTRY_DB_POOL_MAX: 4,
      GANTRY_DB_ACQUIRE_TIMEOUT_MS: BOUND_MS,
      GANTRY_DB_STATEMENT_TIMEOUT_MS: BOUND_MS,
    },
  );
  const node = await startNode(config, { logger: createLogger('silent') });
  const http = new HttpClient(node.baseUrl);
  const t = { http } as unknown as TestNode;
  try {
    const s = await setupTeam(t);
    const wf = await createWorkflow(t, s, tinyGraph());
    const ok = await http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'before' } }, { token: s.sk.value });
    assert.equal(ok.status, 202, ok.text);

    proxy.blackhole();
    const readyStarted = Date.now();
    const ready = await http.get(`http://127.0.0.1:${node.httpPort}/readyz`);
    const readyMs = Date.now() - readyStarted;
    assert.equal(ready.status, 503, ready.text);
    assert.ok(readyMs < 1000, `/readyz answered in ${readyMs} ms`);

    // six concurrent submits (more than the pool): each answers 503 well before a 10 s client timeout
    const started = Date.now();
    const submits = await Promise.all(
      Array.from({ length: 6 }, async (_, i) => {
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(), 10_000);
        try {
          const r = await fetch(`${node.baseUrl}/r/workflows/${wf}/run`, {
            method: 'POST',
            headers: { authorization: `Bearer ${s.sk.value}`, 'content-type': 'application/json' },
            body: JSON.stringify({ parameters: { prompt: `during ${i}` } }),
            signal: ac.signal,
          });
          return { status: r.status, retryAfter: r.headers.get('retry-after'), body: (await r.json()) as Record<string, unknown>, ms: Date.now() - started };
        } finally {
          clearTimeout(timer);
        }
      }),
    );
    for (const r of submits) {
      assert.equal(r.status, 503, JSON.stringify(r));
      assert.equal(r.body.error_code, 'database_unavailable');
      assert.ok(Number(r.retryAfter) >= 1, `Retry-After ${r.retryAfter}`);
      // a statement bound, then an acquire bound for the ones queued behind it, plus slack for a loaded machine
      assert.ok(r.ms < 2 * BOUND_MS + 2500, `answered in ${r.ms} ms`);
    }

    proxy.restore();
    // the node recovers on its own: fresh connections replace the ones it destroyed
    await waitFor('the node ready again', async () => (await http.get(`http://127.0.0.1:${node.httpPort}/readyz`)).status === 200, 20_000, 200);
    const after = await http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'after' } }, { token: s.sk.value });
    assert.equal(after.status, 202, after.text);
    const list = await http.get('/r/tasks?per_page=100', { token: s.sk.value });
    assert.equal(list.status, 200, list.text);
    const prompts = (list.body.task_list as Array<{ parameters: { prompt: string } }>).map((x) => x.parameters.prompt).sort();
    assert.deepEqual(prompts, ['after', 'before'], 'the submits answered 503 were not committed');
  } finally {
    await node.close();
    await proxy.stop();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
