import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { submitTask, newTeam } from '../helpers/tasks.js';
import { FakeClock } from '../../src/shared/clock.js';
import type { ServerToAgent } from '../../src/actors/ports.js';

/**
 * Model test of the task state machine on the real stack (actors + PostgreSQL): random
 * interleavings of runs, agents joining and leaving, ACK, progress, finish, error, timeout, cancel,
 * duplicate and stale messages. After each run the persisted history must satisfy the invariants.
 */
let t: TestNode;
let clock: FakeClock;
let sql: pg.Client;
const GRACE_S = 2;
before(async () => {
  clock = new FakeClock(Date.now());
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: GRACE_S, GANTRY_TASK_TIMEOUT_MAX_S: 3600, GANTRY_RETRY_BACKOFF_BASE_S: 0 }, 'model', { clock });
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
});
after(async () => {
  await sql.end();
  await t.stop();
});

type Cmd =
  | { c: 'submit'; retries: number; timeoutS: number }
  | { c: 'join'; slots: number }
  | { c: 'leave'; agent: number }
  | { c: 'ack'; agent: number; pick: number; stale: boolean }
  | { c: 'progress'; agent: number; pick: number }
  | { c: 'finish'; agent: number; pick: number; stale: boolean }
  | { c: 'fail'; agent: number; pick: number }
  | { c: 'dup'; agent: number; pick: number }
  | { c: 'advance'; ms: number }
  | { c: 'cancel'; pick: number };

const small = fc.nat({ max: 7 });
const cmd: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ c: fc.constant('submit' as const), retries: fc.nat({ max: 2 }), timeoutS: fc.constantFrom(0, 5, 30) }) },
  { weight: 2, arbitrary: fc.record({ c: fc.constant('join' as const), slots: fc.integer({ min: 1, max: 2 }) }) },
  { weight: 1, arbitrary: fc.record({ c: fc.constant('leave' as const), agent: small }) },
  { weight: 5, arbitrary: fc.record({ c: fc.constant('ack' as const), agent: small, pick: small, stale: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ c: fc.constant('progress' as const), agent: small, pick: small }) },
  { weight: 4, arbitrary: fc.record({ c: fc.constant('finish' as const), agent: small, pick: small, stale: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ c: fc.constant('fail' as const), agent: small, pick: small }) },
  { weight: 1, arbitrary: fc.record({ c: fc.constant('dup' as const), agent: small, pick: small }) },
  { weight: 2, arbitrary: fc.record({ c: fc.constant('advance' as const), ms: fc.constantFrom(1000, 3000, 6000, 31_000) }) },
  { weight: 1, arbitrary: fc.record({ c: fc.constant('cancel' as const), pick: small }) },
);
const reached: Record<string, number> = {};

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
/** Allowed status successions (the spec's table plus api-decisions' provisioning and agent-loss rules). */
const NEXT: Record<string, string[]> = {
  pending: ['waiting', 'provisioning', 'queued', 'cancelled'],
  waiting: ['provisioning', 'queued', 'cancelled'],
  provisioning: ['queued', 'waiting', 'failed', 'cancelled'],
  queued: ['running', 'waiting', 'failed', 'cancelled'],
  running: ['completed', 'failed', 'cancelled'],
};

type Assign = Extract<ServerToAgent, { type: 'assign' }>;

async function settleAll(team: string, taskIds: string[], agents: FakeAgent[]): Promise<void> {
  // two rounds: messages told during a turn are processed by the next asks
  for (let i = 0; i < 3; i++) {
    for (const a of agents) if (a.agentId) await t.node.actors.ask({ kind: 'agent', id: a.agentId }, { type: 'get' });
    await t.node.actors.ask({ kind: 'team-scheduler', id: team }, { type: 'stats' });
    for (const id of taskIds) await t.node.actors.ask({ kind: 'task', id }, { type: 'get' });
  }
}

test('task state machine: invariants hold under random interleavings (fast-check, real PostgreSQL)', { timeout: 240_000 }, async () => {
  let runs = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(cmd, { minLength: 5, maxLength: 40 }), async (cmds) => {
      runs++;
      const team = newTeam();
      const agents: FakeAgent[] = [];
      const connected = new Set<FakeAgent>();
      const tasks: string[] = [];
      // the latest assignment of each task this agent got (older epochs are what 'stale' sends)
      const assignOf = (a: FakeAgent, pick: number): Assign | undefined => {
        const latest = new Map<string, Assign>();
        for (const m of a.inbox) if (m.type === 'assign') latest.set(m.taskId, m);
        const as = [...latest.values()].reverse();
        return as.length ? as[pick % as.length] : undefined;
      };
      for (const k of cmds) {
        const ag = 'agent' in k ? agents[k.agent % Math.max(1, agents.length)] : undefined;
        switch (k.c) {
          case 'submit':
            tasks.push(await submitTask(t.node, team, { maxRetries: k.retries, timeoutS: k.timeoutS }));
            break;
          case 'join': {
            const a = await new FakeAgent(t.node, { teamId: team, slots: k.slots }).connect();
            agents.push(a);
            connected.add(a);
            break;
          }
          case 'leave':
            if (ag && connected.has(ag)) {
              await ag.disconnect();
              connected.delete(ag);
            }
            break;
          case 'ack':
          case 'finish': {
            const a = ag && assignOf(ag, k.pick);
            if (!ag || !a || !connected.has(ag)) break;
            // stale: an epoch the task is not at (an older assignment's, or one from the future)
            const m = k.stale ? { ...a, epoch: k.pick % 2 === 0 ? a.epoch - 1 : a.epoch + 1 } : a;
            if (k.c === 'ack') ag.ack(m);
            else ag.finish(m, k.stale ? { stale_write: true } : { storage_key: `outputs/${a.taskId}/${a.epoch}.png`, image_count: 1 });
            break;
          }
          case 'progress': {
            const a = ag && assignOf(ag, k.pick);
            if (ag && a && connected.has(ag)) ag.progress(a, { progress: 0.3, step_current: 3, step_total: 10, current_node: 'n' });
            break;
          }
          case 'fail': {
            const a = ag && assignOf(ag, k.pick);
            if (ag && a && connected.has(ag)) ag.fail(a, 'random failure');
            break;
          }
          case 'dup': {
            const a = ag && assignOf(ag, k.pick);
            if (ag && a && connected.has(ag)) {
              ag.ack(a);
              ag.ack(a);
              ag.finish(a, { storage_key: `outputs/${a.taskId}/${a.epoch}.png`, image_count: 1 });
              ag.finish(a, { storage_key: `outputs/${a.taskId}/${a.epoch}.png`, image_count: 1 });
            }
            break;
          }
          case 'advance':
            clock.advance(k.ms);
            break;
          case 'cancel': {
            const id = tasks[k.pick % Math.max(1, tasks.length)];
            if (id) await t.node.actors.ask({ kind: 'task', id }, { type: 'cancel' }).catch(() => undefined);
            break;
          }
        }
        await settleAll(team, tasks, agents);
        // retry tasks join the population
        const r = await sql.query('select id from tasks where team_id = $1 order by seq', [team]);
        for (const row of r.rows) if (!tasks.includes(row.id)) tasks.push(row.id);
      }
      await settleAll(team, tasks, agents);

      // ---- invariants, read back from PostgreSQL
      const rows = (await sql.query('select * from tasks where team_id = $1', [team])).rows;
      for (const row of rows) {
        reached[row.task_status] = (reached[row.task_status] ?? 0) + 1;
        if (row.retry_task_id) reached.retried = (reached.retried ?? 0) + 1;
        const ev = (await sql.query('select event_type, payload from task_events where task_id = $1 order by id', [row.id])).rows;
        const statuses = ev.map((e) => (e.event_type === 'progress' ? null : e.event_type === 'status' ? e.payload.status : e.event_type)).filter((s): s is string => s !== null);
        assert.equal(statuses[0], 'pending', 'history starts at pending');
        // every transition has its event row, in an allowed succession, none out of a terminal state
        for (let i = 1; i < statuses.length; i++) {
          const from = statuses[i - 1]!;
          assert.ok(!TERMINAL.has(from), `transition out of terminal ${from} -> ${statuses[i]} (task ${row.id})`);
          assert.ok(NEXT[from]?.includes(statuses[i]!), `illegal ${from} -> ${statuses[i]}`);
        }
        // the row agrees with its last event
        assert.equal(row.task_status, statuses[statuses.length - 1]);
        // exactly one terminal event at most
        assert.ok(statuses.filter((s) => TERMINAL.has(s)).length <= 1);
        // progress only while running
        for (const [i, e] of ev.entries()) {
          if (e.event_type !== 'progress') continue;
          const before = ev.slice(0, i).filter((x) => x.event_type !== 'progress').pop();
          assert.equal(before?.payload.status, 'running', 'progress event only while running');
        }
        // retries: never beyond max_retries, linked both ways
        assert.ok(row.attempt <= row.max_retries + 1, `attempt ${row.attempt} > max_retries+1`);
        if (row.retry_task_id) {
          const child = rows.find((x) => x.id === row.retry_task_id);
          assert.ok(child, 'retry task exists');
          assert.equal(child.parent_task_id, row.id);
          assert.equal(child.attempt, row.attempt + 1);
          assert.equal(row.task_status, 'failed');
        }
        // no stale write applied: a completion sent with a wrong epoch never lands; the one that did
        // carries the epoch the task was assigned at
        if (row.task_status === 'completed') {
          assert.notEqual(row.output?.stale_write, true, 'a stale completion was applied');
          assert.equal(row.output?.storage_key, `outputs/${row.id}/${row.lease_epoch}.png`);
        }
      }
      // the same task never got two live assignments with the same epoch to different agents
      const seen = new Map<string, string>();
      for (const a of agents)
        for (const m of a.inbox)
          if (m.type === 'assign') {
            const k = `${m.taskId}:${m.epoch}`;
            assert.ok(!seen.has(k) || seen.get(k) === a.agentId, `epoch ${k} assigned twice`);
            seen.set(k, a.agentId);
          }
      for (const a of connected) await a.disconnect();
    }),
    { numRuns: Number(process.env.MODEL_RUNS ?? 150), endOnFailure: true },
  );
  console.log(`model test: ${runs} runs; final states: ${JSON.stringify(reached)}`);
});
