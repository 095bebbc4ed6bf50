// TEMPORARY (replaced by the membership helper's placement at merge): rendezvous hashing.
import type { Member, MembershipView } from './ports.js';

function h(s: string): number {
  let x = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) x = Math.imul(x ^ s.charCodeAt(i), 0x01000193);
  return x >>> 0;
}

export class Placement {
  private readonly byId: Map<string, Member>;
  constructor(readonly view: MembershipView) {
    this.byId = new Map(view.members.map((m) => [m.memberId, m]));
  }
  owner(kind: string, id: string): Member | null {
    let best: Member | null = null;
    let bw = -1;
    for (const m of this.view.members) {
      const w = h(`${m.memberId}|${kind}/${id}`);
      if (w > bw) {
        bw = w;
        best = m;
      }
    }
    return best;
  }
  member(memberId: string): Member | null {
    return this.byId.get(memberId) ?? null;
  }
}
