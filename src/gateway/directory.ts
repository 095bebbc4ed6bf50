/**
 * The gateway's routing table on each node: a team's services by slug with their instances, read
 * from PostgreSQL and cached until the container-service actor of that team says something changed
 * (the change is broadcast to every node) or a short TTL passes (the safety net when a broadcast
 * was missed). Lookups on the hot path are a map hit.
 */
import type { ServiceInstance, ServiceRecord } from '../domain/containers/schema.js';

export interface ServiceRoute {
  svc: ServiceRecord;
  instances: ServiceInstance[];
}

export interface DirectoryStore {
  list(teamId: string, limit: number, offset: number): Promise<{ rows: ServiceRecord[]; total: number }>;
  teamInstances(teamId: string): Promise<Array<ServiceInstance & { serviceId: string }>>;
}

interface TeamEntry {
  at: number;
  generation: number;
  bySlug: Map<string, ServiceRoute>;
  loading: Promise<TeamEntry> | null;
}

export class ServiceDirectory {
  private readonly teams = new Map<string, TeamEntry>();
  private generation = 0;
  private readonly listeners: Array<(teamId: string | null) => void> = [];

  constructor(
    private readonly store: DirectoryStore,
    private readonly o: { ttlMs: number; now: () => number; healthy?: () => boolean },
  ) {}

  async get(teamId: string, slug: string): Promise<ServiceRoute | null> {
    const e = this.teams.get(teamId);
    if (e && e.generation === this.generation && this.o.now() - e.at < this.o.ttlMs && (this.o.healthy?.() ?? true)) return e.bySlug.get(slug) ?? null;
    return (await this.load(teamId)).bySlug.get(slug) ?? null;
  }

  /** A team's services or instances changed (from any node). */
  invalidate(teamId: string): void {
    this.teams.delete(teamId);
    for (const l of this.listeners) l(teamId);
  }

  /** Everything may be stale (a missed broadcast). */
  invalidateAll(): void {
    this.generation++;
    this.teams.clear();
    for (const l of this.listeners) l(null);
  }

  /** Called after a team's entry (null: every entry) was dropped (held requests look again). */
  onInvalidate(l: (teamId: string | null) => void): void {
    this.listeners.push(l);
  }

  private load(teamId: string): Promise<TeamEntry> {
    const gen = this.generation;
    const cur = this.teams.get(teamId);
    if (cur?.loading) return cur.loading;
    const holder: { p: Promise<TeamEntry> | null } = { p: null };
    const p = (async (): Promise<TeamEntry> => {
      const [svcs, insts] = await Promise.all([this.store.list(teamId, 10_000, 0), this.store.teamInstances(teamId)]);
      const bySlug = new Map<string, ServiceRoute>();
      const byId = new Map<string, ServiceRoute>();
      for (const svc of svcs.rows) {
        const r = { svc, instances: [] as ServiceInstance[] };
        bySlug.set(svc.slug, r);
        byId.set(svc.id, r);
      }
      for (const i of insts) byId.get(i.serviceId)?.instances.push(i);
      const entry: TeamEntry = { at: this.o.now(), generation: gen, bySlug, loading: null };
      // an invalidation that arrived while loading wins: the entry is used once, not cached
      if (this.teams.get(teamId)?.loading === holder.p && this.generation === gen) this.teams.set(teamId, entry);
      return entry;
    })();
    holder.p = p;
    const placeholder: TeamEntry = { at: 0, generation: gen, bySlug: new Map(), loading: p };
    this.teams.set(teamId, placeholder);
    p.catch(() => {
      if (this.teams.get(teamId) === placeholder) this.teams.delete(teamId);
    });
    return p;
  }
}
