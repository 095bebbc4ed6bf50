/**
 * Task lifecycle logs: the node logs each committed task transition once at info with task_id,
 * team_id, from/to, attempt and agent_id (and nothing of the task's parameters); polling GETs
 * answered 200 are logged at debug, not info, while writes and errors stay at info. The agent's
 * progress-log gate passes the first tick, a stage change, or a tick after the interval.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { createLogger } from '../../src/shared/logger.js';
import type { GantryNode } from '../../src/main.js';
import { ProgressLogGate, PROGRESS_LOG_INTERVAL_MS } from '../../src/agent/runner.js';
import { startTestNode, type HttpClient, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { submitTask, waitForStatus } from '../helpers/tasks.js';

interface LogLine {
  level: string;
  msg: string;
  [k: string]: unknown;
}

let node: GantryNode;
let http: HttpClient;
let t: TestNode;
const logged: LogLine[] = [];
const waiters: Array<{ pred: (l: LogLine) => boolean; resolve: (l: LogLine) => void }> = [];

/** Resolves with the first logged line (already there or still to come) matching pred; rejects when none came. */
function lineMatching(pred: (l: LogLine) => boolean, what: string, timeoutMs = 10_000): Promise<LogLine> {
  const have = logged.find(pred);
  if (have) return Promise.resolve(have);
  return new Promise((resolve, reject) => {
    const w = {
      pred,
      resolve: (l: LogLine) => {
        clearTimeout(timer);
        resolve(l);
      },
    };
    const timer = setTimeout(() => {
      waiters.splice(waiters.indexOf(w), 1);
      reject(new Error(`no log line: ${what}`));
    }, timeoutMs);
    waiters.push(w);
  });
}

before(async () => {
  let partial = '';
  const dest = new Writable({
    write(chunk: Buffer, _enc, cb) {
      const parts = (partial + String(chunk)).split('\n');
      partial = parts.pop() ?? '';
      for (const p of parts.filter(Boolean)) {
        const l = JSON.parse(p) as LogLine;
        logged.push(l);
        for (let i = waiters.length - 1; i >= 0; i--) {
          const w = waiters[i];
          if (w && w.pred(l)) {
            waiters.splice(i, 1);
            w.resolve(l);
          }
        }
      }
      cb();
    },
  });
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 10_000 }, 'tasklogs', { logger: createLogger('debug', dest) });
  ({ node, http } = t);
});

after(async () => {
  await t?.stop();
});

const levelName = (l: LogLine): string => String(l.level);
const transitions = (taskId: string): LogLine[] => logged.filter((l) => l.msg === 'task transition' && l.task_id === taskId);

test('each committed transition is one info line with task and team ids; polling GETs are not logged at info', async () => {
  const owner: TestUser = await registerUser(http);
  const team = owner.teamId;
  const agent = await new FakeAgent(node, { teamId: team }).connect();
  const id = await submitTask(node, team);
  const a = await agent.assignment(id);
  await waitForStatus(node, id, 'queued');
  agent.ack(a);
  await waitForStatus(node, id, 'running');
  agent.progress(a, { progress: 0.5, step_current: 10, step_total: 20, current_node: '3 KSampler' });
  agent.finish(a);
  await waitForStatus(node, id, 'completed');
  await lineMatching((l) => l.msg === 'task transition' && l.task_id === id && l.to === 'completed', 'the transition to completed');

  const lines = transitions(id);
  assert.deepEqual(
    lines.map((l) => [l.from, l.to]),
    [
      ['pending', 'queued'],
      ['queued', 'running'],
      ['running', 'completed'],
    ],
  );
  for (const l of lines) {
    assert.equal(levelName(l), 'info');
    assert.equal(l.team_id, team);
    assert.equal(l.attempt, 1);
    assert.equal(l.agent_id, agent.agentId);
    // ids and states only: nothing of the task's parameters or workflow
    assert.deepEqual(
      Object.keys(l)
        .filter((k) => !['level', 'time', 'pid', 'hostname', 'msg', 'component', 'actor'].includes(k))
        .sort(),
      ['agent_id', 'attempt', 'from', 'lease_epoch', 'task_id', 'team_id', 'to'],
    );
  }
  // a progress tick is not a transition
  assert.ok(!logged.some((l) => l.msg === 'task transition' && l.task_id === id && l.to === 'running' && l.from === 'running'));

  // polling: the task's status, the list, health, readiness, metrics (answered 200) -> debug only
  const auth = { token: owner.accessToken, team };
  const polls = [
    await http.get(`/r/tasks/${id}`, auth),
    await http.get('/r/tasks', auth),
    await http.get(`${node.baseUrl.replace(/\/api\/v1$/, '')}/healthz`),
    await http.get(`${node.baseUrl.replace(/\/api\/v1$/, '')}/readyz`),
    await http.get(`${node.baseUrl.replace(/\/api\/v1$/, '')}/metrics`),
  ];
  // a write and an error still at info
  const write = await http.post('/auth/login', { email_address: owner.email, password: owner.password });
  const missing = await http.get(`/r/tasks/00000000-0000-7000-8000-000000000000`, auth);
  for (const p of polls) assert.equal(p.status, 200, p.text);
  assert.equal(write.status, 200);
  assert.equal(missing.status, 404);

  const requestLine = async (r: { headers: Headers }): Promise<LogLine> => {
    const rid = r.headers.get('x-request-id');
    assert.ok(rid);
    return lineMatching((l) => l.msg === 'request' && l.request_id === rid, `the access line of ${rid}`);
  };
  for (const p of polls) {
    const l = await requestLine(p);
    assert.equal(levelName(l), 'debug', `${String(l.method)} ${String(l.path)} logged at ${levelName(l)}`);
    assert.ok(!logged.some((x) => x.request_id === l.request_id && levelName(x) === 'info'), `no info line for ${String(l.path)}`);
  }
  assert.equal(levelName(await requestLine(write)), 'info');
  const miss = await requestLine(missing);
  assert.equal(levelName(miss), 'info');
  assert.equal(miss.status, 404);
});

test('agent progress log gate: first tick, a stage change, or once the interval passed', () => {
  const g = new ProgressLogGate();
  const t0 = 1000;
  assert.equal(g.pass('download', t0), true);
  assert.equal(g.pass('download', t0 + 100), false);
  assert.equal(g.pass('download', t0 + PROGRESS_LOG_INTERVAL_MS - 1), false);
  assert.equal(g.pass('train', t0 + PROGRESS_LOG_INTERVAL_MS - 1), true, 'stage change');
  const t1 = t0 + PROGRESS_LOG_INTERVAL_MS - 1;
  assert.equal(g.pass('train', t1 + 1), false);
  assert.equal(g.pass('train', t1 + PROGRESS_LOG_INTERVAL_MS), true, 'interval passed');
  assert.equal(PROGRESS_LOG_INTERVAL_MS, 5000);
});
