import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Placement } from '../../src/cluster/placement.js';
import type { Member, MembershipView } from '../../src/cluster/ports.js';

const member = (id: string): Member => ({ memberId: id, nodeId: id.split('/')[0] as string, address: `${id}:1`, startedAt: 0 });
const view = (ids: string[], version = 1): MembershipView => ({ version, members: ids.map(member), suspects: [] });
const ids10 = Array.from({ length: 10 }, (_, i) => `n${i}/${(i * 40503) % 65536}`);

test('deterministic: the same view and key give the same owner, whatever the member order', () => {
  fc.assert(
    fc.property(fc.string({ minLength: 1, maxLength: 40 }), fc.constantFrom('task', 'team-scheduler', 'agent'), (id, kind) => {
      const a = new Placement(view(ids10)).owner(kind, id);
      const b = new Placement(view([...ids10].reverse())).owner(kind, id);
      assert.equal(a?.memberId, b?.memberId);
    }),
    { numRuns: 500 },
  );
});

test('balanced: 10,000 keys over 10 members, each within 20% of 1/N', () => {
  const p = new Placement(view(ids10));
  const counts = new Map<string, number>();
  for (let i = 0; i < 10_000; i++) {
    const o = p.owner('task', `01a2-${i}`)?.memberId as string;
    counts.set(o, (counts.get(o) ?? 0) + 1);
  }
  assert.equal(counts.size, 10);
  for (const [m, n] of counts) assert.ok(n >= 800 && n <= 1200, `${m}: ${n} keys`);
});

test('minimal movement: a member joining takes keys only for itself; a member leaving gives away only its own', () => {
  fc.assert(
    fc.property(fc.array(fc.string({ minLength: 1, maxLength: 20 }), { minLength: 50, maxLength: 200 }), fc.integer({ min: 0, max: 9 }), (keys, leaver) => {
      const before = new Placement(view(ids10));
      const joined = new Placement(view([...ids10, 'new/1'], 2));
      const left = new Placement(view(ids10.filter((_, i) => i !== leaver), 2));
      for (const k of keys) {
        const o = before.owner('agent', k)?.memberId;
        const j = joined.owner('agent', k)?.memberId;
        if (j !== o) assert.equal(j, 'new/1', 'a key moved on a join only to the newcomer');
        const l = left.owner('agent', k)?.memberId;
        if (o !== ids10[leaver]) assert.equal(l, o, 'a key of a member that stayed did not move');
        else assert.notEqual(l, o);
      }
    }),
    { numRuns: 200 },
  );
});

test('an empty view has no owner; member() finds live members only', () => {
  assert.equal(new Placement(view([])).owner('task', 'x'), null);
  const p = new Placement(view(ids10));
  assert.equal(p.member(ids10[3] as string)?.memberId, ids10[3]);
  assert.equal(p.member('gone/1'), null);
});
