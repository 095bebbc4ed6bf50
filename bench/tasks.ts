/**
 * Task submission benchmark (issue 5): submits N tasks through HTTP (POST /r/workflows/{id}/run)
 * with C concurrent clients and drives A in-process fake agents (instant ACK + finish). Prints
 * accepted tasks/s, 202 latency p50/p99 and submit-to-dispatch latency p50/p99.
 *   node --import tsx bench/tasks.ts [N=2000] [C=32] [A=16]
 * Uses DATABASE_URL (a fresh database is created on it) or, when unset, the embedded PGlite.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../src/shared/config.js';
import { createLogger } from '../src/shared/logger.js';
import { startNode } from '../src/main.js';
import { HttpClient } from '../test/helpers/node.js';
import { createTestDatabase } from '../test/helpers/pg.js';
import { registerUser, createCredential } from '../test/helpers/identity.js';
import { FakeAgent } from '../test/helpers/fake-agent.js';
import { comfyBody } from '../test/workflows-api/fixtures.js';

const [N = 2000, C = 32, A = 16] = process.argv.slice(2).map(Number);
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};

const db = process.env.DATABASE_URL ? await createTestDatabase('bench') : null;
const dataDir = mkdtempSync(join(tmpdir(), 'gantry-bench-'));
const config = loadConfig({}, {
  DATABASE_URL: db?.url,
  GANTRY_DATA_DIR: dataDir,
  GANTRY_HTTP_HOST: '127.0.0.1',
  GANTRY_HTTP_PORT: 0,
  GANTRY_GRPC_PORT: 0,
  GANTRY_AUTH_RATE_LIMIT_PER_MIN: 100000,
} as never);
const node = await startNode(config, { logger: createLogger('warn') });
const http = new HttpClient(node.baseUrl);
try {
  const user = await registerUser(http);
  const sk = await createCredential(http, user, 'integration');
  const wf = await http.post('/workflows', comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0 }), { token: user.accessToken, team: user.teamId });
  if (wf.status !== 200) throw new Error(wf.text);

  const acceptedAt = new Map<string, number>();
  const dispatchLat: number[] = [];
  let completed = 0;
  let allDone: () => void = () => undefined;
  const done = new Promise<void>((r) => (allDone = r));
  for (let i = 0; i < A; i++) {
    const ag = new FakeAgent(node, { teamId: user.teamId, slots: 4 });
    await ag.connect();
    const origPush = ag.inbox.push.bind(ag.inbox);
    ag.inbox.push = (...msgs) => {
      for (const m of msgs)
        if (m.type === 'assign') {
          const t0 = acceptedAt.get(m.taskId);
          if (t0 !== undefined) dispatchLat.push(performance.now() - t0);
          ag.ack(m);
          ag.finish(m);
          if (++completed === N) allDone();
        }
      return origPush(...msgs);
    };
  }

  const lat: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: C }, async () => {
      while (next < N) {
        next++;
        const s = performance.now();
        const r = await http.post(`/r/workflows/${wf.body.id}/run`, { parameters: { prompt: 'bench' } }, { token: sk.value });
        const e = performance.now();
        if (r.status !== 202) throw new Error(`run: ${r.status} ${r.text}`);
        acceptedAt.set(r.body.task_id, s);
        lat.push(e - s);
      }
    }),
  );
  const tAccepted = performance.now() - t0;
  await Promise.race([done, new Promise((r) => setTimeout(r, 120_000))]);
  const tAll = performance.now() - t0;
  console.log(`database: ${db ? 'PostgreSQL server' : 'embedded PGlite'}; N=${N} tasks, ${C} concurrent clients, ${A} agents x 4 slots`);
  console.log(`accepted: ${(N / (tAccepted / 1000)).toFixed(0)} tasks/s (202 in ${(tAccepted / 1000).toFixed(2)} s)`);
  console.log(`202 latency: p50 ${pct(lat, 50).toFixed(1)} ms, p99 ${pct(lat, 99).toFixed(1)} ms`);
  console.log(`submit -> dispatch: p50 ${pct(dispatchLat, 50).toFixed(1)} ms, p99 ${pct(dispatchLat, 99).toFixed(1)} ms`);
  console.log(`completed ${completed}/${N}; end-to-end ${(completed / (tAll / 1000)).toFixed(0)} tasks/s`);
} finally {
  await node.close();
  await db?.drop();
  rmSync(dataDir, { recursive: true, force: true });
}
