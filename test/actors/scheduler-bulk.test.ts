/**
 * The scheduler on a real node and PostgreSQL: its re-reads are bulk (one loadMany statement for
 * a burst of tasks, never one load per task), and loadMany itself returns exactly the rows asked for.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { submitTask, waitForStatus, newTeam } from '../helpers/tasks.js';
import { uuidv7 } from '../../src/shared/ids.js';

let t: TestNode;
before(async () => {
  t = await startTestNode({}, 'bulk');
});
after(async () => {
  await t.stop();
});

test('loadMany: one statement for many ids; unknown and malformed ids are absent', async () => {
  const team = newTeam();
  const ids = [await submitTask(t.node, team), await submitTask(t.node, team), await submitTask(t.node, team)];
  const got = await t.node.taskStore.loadMany([...ids, uuidv7(), 'not-a-uuid']);
  assert.deepEqual(got.map((r) => r.id).sort(), [...ids].sort());
  for (const r of got) assert.equal(r.teamId, team);
  assert.deepEqual(await t.node.taskStore.loadMany([]), []);
});

test('a burst of requeued tasks is re-read by ONE loadMany, and they are back in the queue', async () => {
  const team = newTeam();
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) ids.push(await submitTask(t.node, team));
  for (const id of ids) await waitForStatus(t.node, id, 'waiting'); // no agent: all wait
  const sched = { kind: 'team-scheduler', id: team } as const;
  assert.equal((await t.node.actors.ask(sched, { type: 'stats' })).queued, 6);
  const store = t.node.taskStore;
  const calls: { loadMany: string[][]; load: string[] } = { loadMany: [], load: [] };
  const loadMany = store.loadMany.bind(store);
  const load = store.load.bind(store);
  store.loadMany = async (xs) => (calls.loadMany.push([...xs]), loadMany(xs));
  store.load = async (x) => (calls.load.push(x), load(x));
  try {
    // as after an agent loss: each task is requeued (the scheduler must re-read them)
    for (const id of ids) t.node.actors.tell(sched, { type: 'task_requeued', taskId: id });
    const stats = await t.node.actors.ask(sched, { type: 'stats' }); // answered once the refresh landed
    assert.equal(stats.queued, 6);
    // one read in flight at a time: the first message's read, then one for everything that came meanwhile
    assert.ok(calls.loadMany.length >= 1 && calls.loadMany.length <= 2, `bulk reads for the burst, not one per task: ${JSON.stringify(calls.loadMany)}`);
    assert.deepEqual(calls.loadMany.flat().sort(), [...ids].sort(), 'each task read exactly once');
    assert.deepEqual(calls.load, [], 'never one load per task');
  } finally {
    store.loadMany = loadMany;
    store.load = load;
  }
});
