import type { WorkflowDefinition } from '../domain/workflows/schema.js';
import type { WorkflowRecord } from './workflow-store.js';

/**
 * The hot-path cache of workflow definitions. A published version never changes, so its
 * definition and snapshot id are kept without expiry (bounded in count). What a ref points at
 * (the current version and status of an id or slug: the "head") changes on update and delete: heads
 * are dropped by every write through a WorkflowStore of this process and expire after a short TTL
 * (the backstop for writes made by another process). Negative answers are never cached.
 * A load that raced with an invalidation is not stored (generation check).
 */
export class WorkflowCache {
  private readonly heads = new Map<string, { head: WorkflowRecord; expiresAt: number }>();
  private readonly versions = new Map<string, { definition: WorkflowDefinition; snapshotId: string; createdAt: string }>();
  private gen = 0;
  readonly stats = { hits: 0, misses: 0, invalidations: 0 };

  constructor(
    private readonly o: { ttlMs: number; maxEntries: number; now: () => number } = { ttlMs: 5_000, maxEntries: 20_000, now: Date.now },
  ) {}

  generation(): number {
    return this.gen;
  }

  private static headKey(teamId: string, ref: { id: string } | { slug: string }): string {
    return 'id' in ref ? `${teamId}|id|${ref.id}` : `${teamId}|slug|${ref.slug}`;
  }

  head(teamId: string, ref: { id: string } | { slug: string }): WorkflowRecord | null {
    const k = WorkflowCache.headKey(teamId, ref);
    const e = this.heads.get(k);
    if (!e || e.expiresAt <= this.o.now()) {
      if (e) this.heads.delete(k);
      this.stats.misses += 1;
      return null;
    }
    this.stats.hits += 1;
    return e.head;
  }

  /** Stores the current record under its id and its slug, unless an invalidation ran since `gen`. */
  putHead(head: WorkflowRecord, gen: number): void {
    if (gen !== this.gen) return;
    const e = { head, expiresAt: this.o.now() + this.o.ttlMs };
    this.bounded(this.heads, WorkflowCache.headKey(head.teamId, { id: head.id }), e);
    this.bounded(this.heads, WorkflowCache.headKey(head.teamId, { slug: head.definition.workflow_slug }), e);
  }

  version(workflowId: string, version: number): { definition: WorkflowDefinition; snapshotId: string; createdAt: string } | null {
    return this.versions.get(`${workflowId}@${version}`) ?? null;
  }

  /** A published version is immutable: cached for good (a deleted workflow's versions are dropped). */
  putVersion(workflowId: string, version: number, v: { definition: WorkflowDefinition; snapshotId: string; createdAt: string }, gen: number): void {
    if (gen !== this.gen) return;
    this.bounded(this.versions, `${workflowId}@${version}`, v);
  }

  private broadcast: ((workflowId: string | null, dropVersions: boolean) => Promise<void>) | null = null;

  /** Cluster: every local invalidation is also sent to the other nodes' caches (main.ts wires the broadcast). */
  onInvalidate(fn: (workflowId: string | null, dropVersions: boolean) => Promise<void>): void {
    this.broadcast = fn;
  }

  /**
   * After a write to the workflow (update, delete) or a new slug (create, import): applied here at
   * once; in a cluster the promise resolves once the other nodes applied it (the write's request
   * answers after that).
   */
  invalidate(workflowId: string | null, opts: { dropVersions?: boolean } = {}): Promise<void> {
    this.applyInvalidation(workflowId, opts.dropVersions ?? false);
    return this.broadcast ? this.broadcast(workflowId, opts.dropVersions ?? false).catch(() => undefined) : Promise.resolve();
  }

  /** An invalidation from another node (or this one's own broadcast coming back): local effect only. */
  applyInvalidation(workflowId: string | null, dropVersions: boolean): void {
    const opts = { dropVersions };
    this.gen += 1;
    this.stats.invalidations += 1;
    if (workflowId === null) return;
    for (const [k, e] of this.heads) if (e.head.id === workflowId) this.heads.delete(k);
    if (opts.dropVersions) for (const k of this.versions.keys()) if (k.startsWith(`${workflowId}@`)) this.versions.delete(k);
  }

  private bounded<V>(m: Map<string, V>, k: string, v: V): void {
    m.delete(k);
    m.set(k, v);
    if (m.size > this.o.maxEntries) {
      const oldest = m.keys().next();
      if (!oldest.done) m.delete(oldest.value);
    }
  }
}
