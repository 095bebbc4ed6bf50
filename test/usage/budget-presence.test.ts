/**
 * The run gate's budget presence cache (src/persistence/budget-presence.ts): which teams have GPU
 * budgets, so a run no budget applies to needs no statement. Reads are counted on a fake reader;
 * the node-level behaviour (a budget set or removed holds from the next submit, on every node of a
 * cluster) is in usage.test.ts and cluster/quotas.cluster.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetPresence } from '../../src/persistence/budget-presence.js';

function setup(rows: Map<string, Array<string | null>>, o: { ttlMs?: number; state?: () => { healthy: boolean; generation: number } } = {}) {
  let now = 1_000;
  const reads: string[] = [];
  let gate: Promise<void> | null = null;
  const p = new BudgetPresence({
    read: async (teamId) => {
      reads.push(teamId);
      const snapshot = [...(rows.get(teamId) ?? [])];
      if (gate) await gate;
      return snapshot;
    },
    now: () => now,
    ...o,
  });
  return { p, reads, tick: (ms: number) => (now += ms), hold: (g: Promise<void> | null): void => {
      gate = g;
    },
  };
}

test('a team without budgets is read once, then answered from memory; team and credential budgets apply to whom they name', async () => {
  const rows = new Map<string, Array<string | null>>([
    ['team-b', [null]],
    ['team-c', ['cred-1']],
  ]);
  const { p, reads } = setup(rows);
  assert.equal(await p.mayApply('team-a', 'cred-1'), false);
  assert.equal(await p.mayApply('team-a', null), false);
  assert.equal(await p.mayApply('team-b', null), true);
  assert.equal(await p.mayApply('team-b', 'cred-9'), true);
  assert.equal(await p.mayApply('team-c', 'cred-1'), true);
  assert.equal(await p.mayApply('team-c', 'cred-2'), false);
  assert.equal(await p.mayApply('team-c', null), false);
  assert.deepEqual(reads, ['team-a', 'team-b', 'team-c']);
  // concurrent first reads of one team share one statement
  await Promise.all([p.mayApply('team-d', null), p.mayApply('team-d', 'x'), p.mayApply('team-d', null)]);
  assert.equal(reads.filter((r) => r === 'team-d').length, 1);
});

test('drop: the next check reads again; a read that began before the drop is not kept', async () => {
  const rows = new Map<string, Array<string | null>>();
  const { p, reads, hold } = setup(rows);
  assert.equal(await p.mayApply('t', null), false);
  rows.set('t', [null]);
  p.drop('t');
  assert.equal(await p.mayApply('t', null), true);
  assert.equal(reads.length, 2);

  // a read in flight sees the old rows; the change commits and drops the team meanwhile
  rows.set('u', []);
  let release = (): void => undefined;
  hold(new Promise<void>((r) => (release = r)));
  const stale = p.mayApply('u', null);
  await new Promise((r) => setImmediate(r));
  rows.set('u', [null]);
  p.drop('u');
  hold(null);
  release();
  assert.equal(await stale, false, 'the read in flight answers what it saw');
  assert.equal(await p.mayApply('u', null), true, 'but it was not stored: the next check reads the budget');
});

test('entries expire after the TTL; an unhealthy cluster subscription bypasses the cache, a new one empties it; dropAll forgets every team', async () => {
  const rows = new Map<string, Array<string | null>>();
  let healthy = true;
  let generation = 1;
  const { p, reads, tick } = setup(rows, { ttlMs: 5_000, state: () => ({ healthy, generation }) });
  await p.mayApply('t', null);
  tick(4_000);
  await p.mayApply('t', null);
  assert.equal(reads.length, 1);
  tick(1_500);
  await p.mayApply('t', null);
  assert.equal(reads.length, 2, 'expired');
  healthy = false;
  await p.mayApply('t', null);
  await p.mayApply('t', null);
  assert.equal(reads.length, 4, 'every check reads while the node may be missing invalidations');
  healthy = true;
  generation = 2; // subscribed again: what was published meanwhile was missed
  await p.mayApply('t', null);
  await p.mayApply('t', null);
  assert.equal(reads.length, 5, 'read once after the re-subscription, then kept');
  p.dropAll();
  await p.mayApply('t', null);
  assert.equal(reads.length, 6);
});
