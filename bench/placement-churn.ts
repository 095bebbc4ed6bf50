/**
 * Placement churn: how many actors move when the membership changes, for 100 nodes and 10,000
 * agents (and 10,000 tasks), with the placement the cluster uses (rendezvous hashing over the live
 * members, src/cluster/placement.ts), compared with the ideal: a join moves 1/(N+1) of the actors,
 * a leave moves the leaver's share 1/N. Also the cost of one owner() lookup with 100 members.
 * Pure computation; no services.
 *
 *   npm run bench:placement    env: BENCH_NODES (100), BENCH_ACTORS (10000)
 * Last line: `PLACEMENT nodes=... actors=... mean_moved_over_ideal=... max_moved_over_ideal=... lookup_ns=...`
 */
import { Placement } from '../src/cluster/placement.js';
import type { Member, MembershipView } from '../src/cluster/ports.js';

const N = Number(process.env.BENCH_NODES ?? 100);
const ACTORS = Number(process.env.BENCH_ACTORS ?? 10_000);

const member = (i: number): Member => ({ memberId: `node-${i}/${(i * 2654435761) % 4294967296}`, nodeId: `node-${i}`, address: `10.0.${Math.floor(i / 250)}.${i % 250}:50061`, startedAt: 0 });
const viewOf = (ms: Member[], version: number): MembershipView => ({ version, members: [...ms].sort((a, b) => (a.memberId < b.memberId ? -1 : 1)), suspects: [] });
const keys = Array.from({ length: ACTORS }, (_, i) => ({ kind: i % 2 === 0 ? 'agent' : 'task', id: `01a2${i.toString(16).padStart(8, '0')}-${(i * 7919) % 100000}` }));

function owners(p: Placement): string[] {
  return keys.map((k) => p.owner(k.kind, k.id)?.memberId ?? '');
}

const members = Array.from({ length: N }, (_, i) => member(i));
let version = 1;
let current = owners(new Placement(viewOf(members, version)));
let next = N;
const ratios: number[] = [];
const rows: string[] = [];
const changes: Array<{ what: string; apply: () => void; ideal: () => number }> = [];
const rnd = (() => {
  let s = 42;
  return () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
})();
for (let round = 0; round < 5; round++) {
  changes.push({ what: 'a node joins', apply: () => members.push(member(next++)), ideal: () => ACTORS / members.length });
  changes.push({
    what: 'a random node leaves',
    apply: () => members.splice(Math.floor(rnd() * members.length), 1),
    ideal: () => ACTORS / (members.length + 1),
  });
  changes.push({ what: 'the oldest node dies', apply: () => members.shift(), ideal: () => ACTORS / (members.length + 1) });
}
for (const ch of changes) {
  ch.apply();
  version++;
  const after = owners(new Placement(viewOf(members, version)));
  let moved = 0;
  for (let i = 0; i < ACTORS; i++) if (after[i] !== current[i]) moved++;
  const ideal = ch.ideal();
  ratios.push(moved / ideal);
  rows.push(`${ch.what.padEnd(22)} members ${String(members.length).padStart(3)}  moved ${String(moved).padStart(5)} (${((moved / ACTORS) * 100).toFixed(2)}%)  ideal ${ideal.toFixed(0).padStart(5)} (1/N = ${((ideal / ACTORS) * 100).toFixed(2)}%)  ratio ${(moved / ideal).toFixed(2)}`);
  current = after;
}

// lookup cost: owner() over N members (the router calls it per message)
const p = new Placement(viewOf(members, version));
let sink = 0;
const LOOKUPS = 200_000;
const t0 = process.hrtime.bigint();
for (let i = 0; i < LOOKUPS; i++) {
  const k = keys[i % ACTORS] as { kind: string; id: string };
  sink += p.owner(k.kind, k.id)?.memberId.length ?? 0;
}
const ns = Number(process.hrtime.bigint() - t0) / LOOKUPS;

// balance: actors per member
const counts = new Map<string, number>();
for (const o of owners(p)) counts.set(o, (counts.get(o) ?? 0) + 1);
const per = [...counts.values()];
const mean = ACTORS / members.length;

console.log(`PLACEMENT: rendezvous hashing, ${N} nodes, ${ACTORS} actors (agents and tasks), ${changes.length} membership changes`);
for (const r of rows) console.log(r);
console.log(`balance after the changes: ${members.length} members, actors per member min ${Math.min(...per)} max ${Math.max(...per)} (mean ${mean.toFixed(1)})`);
console.log(`owner() lookup with ${members.length} members: ${ns.toFixed(0)} ns (${sink > 0 ? 'checked' : ''})`);
const meanRatio = ratios.reduce((a, b) => a + b, 0) / ratios.length;
console.log(`PLACEMENT nodes=${N} actors=${ACTORS} changes=${changes.length} mean_moved_over_ideal=${meanRatio.toFixed(3)} max_moved_over_ideal=${Math.max(...ratios).toFixed(3)} lookup_ns=${ns.toFixed(0)}`);
