/**
 * Placement: each actor (kind, id) is owned by one live member, chosen by rendezvous (highest random
 * weight) hashing over the view's members. A membership change moves only the actors of the member
 * that left (to the others, evenly) or the ~1/N share the newcomer wins; bench/placement-churn.ts
 * measures it. Ownership only saves work: correctness stays with PostgreSQL's fences.
 *
 * The key is hashed once (two independent 32-bit FNV-1a lanes); each member has a precomputed seed;
 * a member's weight is a murmur3 finaliser of (key hash XOR seed), so a lookup costs one pass over the
 * key and N integer mixes, no allocation.
 */
import type { Member, MembershipView } from './ports.js';

function fnv1a(s: string, seed: number): number {
  let h = seed >>> 0;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** murmur3's 32-bit finaliser: full avalanche of one word. */
function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

export class Placement {
  private readonly members: readonly Member[];
  private readonly seedA: Uint32Array;
  private readonly seedB: Uint32Array;
  private readonly byId: Map<string, Member>;

  constructor(readonly view: MembershipView) {
    this.members = view.members;
    this.seedA = new Uint32Array(this.members.map((m) => fnv1a(m.memberId, 0x811c9dc5)));
    this.seedB = new Uint32Array(this.members.map((m) => fnv1a(m.memberId, 0x2f693b5d)));
    this.byId = new Map(this.members.map((m) => [m.memberId, m]));
  }

  /** The owner of (kind, id), or null when the view is empty. */
  owner(kind: string, id: string): Member | null {
    const n = this.members.length;
    if (n === 0) return null;
    if (n === 1) return this.members[0] as Member;
    const ka = fnv1a(id, fnv1a(kind, 0x811c9dc5));
    const kb = fnv1a(id, fnv1a(kind, 0x2f693b5d));
    let best = 0;
    let bestHi = -1;
    let bestLo = -1;
    for (let i = 0; i < n; i++) {
      // a 64-bit weight as two 32-bit halves (ties in one half are broken by the other)
      const hi = fmix(ka ^ (this.seedA[i] as number));
      const lo = fmix(kb ^ (this.seedB[i] as number));
      if (hi > bestHi || (hi === bestHi && lo > bestLo)) {
        best = i;
        bestHi = hi;
        bestLo = lo;
      }
    }
    return this.members[best] as Member;
  }

  /** The live member with this id (null when it is not in the view). */
  member(memberId: string): Member | null {
    return this.byId.get(memberId) ?? null;
  }
}
