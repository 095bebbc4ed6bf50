import client from 'prom-client';
import type { RuntimeMetrics } from '../actors/runtime/system.js';
import type { RouteDef } from './http.js';
import type { OpsSnapshot } from '../domain/ops.js';

/** Prometheus metrics of this process (served at /metrics). */
export const registry = new client.Registry();
client.collectDefaultMetrics({ register: registry });

const turns = new client.Histogram({
  name: 'gantry_actor_turn_seconds',
  help: 'Duration of one actor mailbox turn',
  labelNames: ['kind', 'ok'],
  buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
  registers: [registry],
});
// the actor runtime reports on every message: plain counters here, copied into the gauges at
// scrape time, and the histogram's label children looked up once (prom-client hashes the labels
// of every inc/observe, which showed in P4's profile)
const depthBy = new Map<string, number>();
const activeBy = new Map<string, number>();
const copyInto = (g: client.Gauge<'kind'>, from: Map<string, number>): void => {
  for (const [kind, v] of from) g.set({ kind }, v);
};
const depth: client.Gauge<'kind'> = new client.Gauge({
  name: 'gantry_actor_mailbox_depth',
  help: 'Messages waiting in actor mailboxes',
  labelNames: ['kind'],
  registers: [registry],
  collect: () => copyInto(depth, depthBy),
});
const active: client.Gauge<'kind'> = new client.Gauge({ name: 'gantry_actor_activations', help: 'Active actors', labelNames: ['kind'], registers: [registry], collect: () => copyInto(active, activeBy) });
const turnChildren = new Map<string, client.Histogram.Internal<'kind' | 'ok'>>();
const turnChild = (kind: string, ok: boolean): client.Histogram.Internal<'kind' | 'ok'> => {
  const k = ok ? kind : `${kind}\u0000`;
  let c = turnChildren.get(k);
  if (!c) turnChildren.set(k, (c = turns.labels({ kind, ok: ok ? 'true' : 'false' })));
  return c;
};

export const actorMetrics: RuntimeMetrics = {
  turn: (kind, ms, ok) => turnChild(kind, ok).observe(ms / 1000),
  depth: (kind, delta) => depthBy.set(kind, (depthBy.get(kind) ?? 0) + delta),
  activations: (kind, delta) => activeBy.set(kind, (activeBy.get(kind) ?? 0) + delta),
};

/** GET /metrics (outside /api/v1): Prometheus text format (the process's registry, then the node's own). */
export function metricsRoute(extra: client.Registry[] = []): RouteDef {
  return {
    method: 'GET',
    path: '/metrics',
    absolute: true,
    doc: { summary: 'Prometheus metrics', tags: ['system'], responses: { 200: { contentType: 'text/plain' } } },
    auth: { kinds: 'public' },
    stream: async (_c, res) => {
      const parts = await Promise.all([registry, ...extra].map((r) => r.metrics()));
      const body = parts.join('\n');
      res.writeHead(200, { 'Content-Type': registry.contentType });
      res.end(body);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Operator and autoscaler metrics of one node (its own registry, served with the process's)

/** What the PostgreSQL-derived gauges read (OpsQueries.snapshot). */
export interface OpsSnapshotSource {
  snapshot(): Promise<OpsSnapshot>;
}

export interface NodeMetricsOptions {
  ops: OpsSnapshotSource;
  /** A snapshot is reused for this long (GANTRY_METRICS_CACHE_MS): scrapes of several gauges and frequent scrapers cost one round of queries. */
  cacheMs: number;
  /** Open SSE streams on this node. */
  sseStreams: () => number;
  /** Agent gRPC streams held by this node. */
  agentStreams: () => number;
  now?: () => number;
}

/** A label set that vanished from the snapshot is still reported as 0 for this long (so a queue that drains reads 0, not "no data"). */
const STALE_SERIES_MS = 10 * 60_000;

/**
 * The per-node registry behind /metrics' operator figures. Two kinds:
 * - counted in PostgreSQL at scrape time (tasks by state, queue depth and oldest age per team and
 *   label set, agents by status and GPU type, webhook backlog): the same value on every node of a
 *   cluster. Aggregate them with max() (or scrape one node), never sum() across nodes.
 * - this node's own (SSE and agent streams, queue wait, finished tasks, proxy requests): sum() them.
 */
export class NodeMetrics {
  readonly registry = new client.Registry();
  private cache: { at: number; value: Promise<OpsSnapshot> } | null = null;
  private readonly seen = new Map<string, Map<string, { labels: Record<string, string>; at: number }>>();
  private readonly queueWait: client.Histogram;
  private readonly finishedTotal: client.Counter;
  private readonly proxyRequests: client.Counter;
  private readonly proxySeconds: client.Histogram;
  private readonly coldStartSeconds: client.Histogram;
  private readonly now: () => number;

  constructor(private readonly o: NodeMetricsOptions) {
    this.now = o.now ?? Date.now;
    const registers = [this.registry];
    const snapshot = (): Promise<OpsSnapshot> => this.snapshot();
    const withStale = (name: string, rows: Array<{ labels: Record<string, string>; value: number }>) => this.withStale(name, rows);
    // collect() runs at scrape time: each gauge reads the (shared, cached) snapshot
    const fromSnapshot = (name: string, help: string, labelNames: string[], rows: (s: OpsSnapshot) => Array<{ labels: Record<string, string>; value: number }>): void => {
      new client.Gauge({
        name,
        help,
        labelNames,
        registers,
        async collect() {
          this.reset();
          // PostgreSQL unreachable: these series are absent from this scrape (the rest of /metrics,
          // gantry_database_up 0 included, is still served)
          const s = await snapshot().catch(() => null);
          if (s) for (const r of withStale(name, rows(s))) this.set(r.labels, r.value);
        },
      });
    };
    new client.Gauge({
      name: 'gantry_database_up',
      help: 'Whether this node\'s PostgreSQL queries of this scrape succeeded (1) or failed (0: the database is unreachable or failing from this node)',
      registers,
      async collect() {
        this.set(await snapshot().then(
          () => 1,
          () => 0,
        ));
      },
    });
    fromSnapshot('gantry_tasks', 'Open tasks by state and team (counted in PostgreSQL: the same on every node)', ['task_status', 'team_id'], (s) =>
      s.tasks.map((t) => ({ labels: { task_status: t.status, team_id: t.teamId }, value: t.count })),
    );
    fromSnapshot('gantry_queue_depth', 'Tasks waiting for an agent (pending + waiting) by team and required-label set (sorted, comma-joined; "" = none). Counted in PostgreSQL', ['team_id', 'required_labels'], (s) =>
      s.queues.map((x) => ({ labels: { team_id: x.teamId, required_labels: x.labels }, value: x.depth })),
    );
    fromSnapshot('gantry_queue_oldest_waiting_seconds', 'Age of the oldest task waiting for an agent, by team and required-label set (0 when none waits). Counted in PostgreSQL', ['team_id', 'required_labels'], (s) =>
      s.queues.map((x) => ({ labels: { team_id: x.teamId, required_labels: x.labels }, value: Math.round(x.oldestAgeS * 1000) / 1000 })),
    );
    // per pool (team, label set, tool_type, GPU type): what an autoscaler scales the right node pool by (deploy/observability/keda-scaledobject.yaml)
    const POOL = ['team_id', 'required_labels', 'tool_type', 'gpu_type'];
    const poolLabels = (x: OpsSnapshot['pools'][number]): Record<string, string> => ({ team_id: x.teamId, required_labels: x.labels, tool_type: x.toolType, gpu_type: x.gpuType });
    fromSnapshot('gantry_pool_waiting_tasks', 'Tasks waiting for an agent (pending + waiting) by team, required-label set, tool_type and GPU type (the preferred_gpu, "" = any). Counted in PostgreSQL', POOL, (s) =>
      s.pools.map((x) => ({ labels: poolLabels(x), value: x.depth })),
    );
    fromSnapshot('gantry_pool_oldest_waiting_seconds', 'Age of the oldest task waiting for an agent, by team, required-label set, tool_type and GPU type (0 when none waits). Counted in PostgreSQL', POOL, (s) =>
      s.pools.map((x) => ({ labels: poolLabels(x), value: Math.round(x.oldestAgeS * 1000) / 1000 })),
    );
    // a counter read from task_attempts (every node reports the installation's total: max(), not sum())
    new client.Counter({
      name: 'gantry_gpu_seconds_total',
      help: 'GPU-seconds (run time x GPUs held) of ended task attempts, by team, workflow and GPU type ("" = an agent without GPU model; the provider for cloud attempts). Counted in PostgreSQL',
      labelNames: ['team_id', 'workflow_id', 'gpu_type'],
      registers,
      async collect() {
        this.reset();
        const s = await snapshot().catch(() => null);
        if (s) for (const g of s.gpuSeconds) this.inc({ team_id: g.teamId, workflow_id: g.workflowId, gpu_type: g.gpuType }, Math.max(0, Math.round(g.gpuSeconds * 1000) / 1000));
      },
    });
    fromSnapshot('gantry_agents', 'Registered agents by status and GPU type ("" = none). Counted in PostgreSQL', ['agent_status', 'gpu_type'], (s) =>
      s.agents.map((a) => ({ labels: { agent_status: a.status, gpu_type: a.gpuType }, value: a.count })),
    );
    fromSnapshot('gantry_webhook_backlog', 'Webhook deliveries not yet delivered (pending or in flight). Counted in PostgreSQL', [], (s) => [{ labels: {}, value: s.webhookBacklog }]);
    fromSnapshot('gantry_webhook_backlog_oldest_seconds', 'Age of the oldest undelivered webhook delivery (0 when none). Counted in PostgreSQL', [], (s) => [{ labels: {}, value: Math.round(s.webhookOldestAgeS * 1000) / 1000 }]);
    new client.Gauge({
      name: 'gantry_sse_streams',
      help: 'Open SSE event streams on this node',
      registers,
      collect() {
        this.set(o.sseStreams());
      },
    });
    new client.Gauge({
      name: 'gantry_agent_streams',
      help: 'Agent gRPC streams held by this node',
      registers,
      collect() {
        this.set(o.agentStreams());
      },
    });
    this.queueWait = new client.Histogram({
      name: 'gantry_scheduler_queue_wait_seconds',
      help: 'Scheduler latency: from a task\'s creation (or the end of its retry backoff) to its assignment to an agent, on the node whose scheduler assigned it',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600],
      registers,
    });
    this.finishedTotal = new client.Counter({ name: 'gantry_tasks_finished_total', help: 'Tasks that reached a terminal state, committed by this node', labelNames: ['task_status'], registers });
    this.proxyRequests = new client.Counter({
      name: 'gantry_proxy_requests_total',
      help: 'Container gateway requests answered by this node (route: proxy, invoke, agent_tunnel; code: HTTP status class)',
      labelNames: ['route', 'code'],
      registers,
    });
    this.proxySeconds = new client.Histogram({
      name: 'gantry_proxy_request_duration_seconds',
      help: 'Container gateway requests: time to the end of the response',
      labelNames: ['route'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.coldStartSeconds = new client.Histogram({
      name: 'gantry_container_cold_start_seconds',
      help: 'Container services scaled to zero: from the request that woke the service to its first healthy replica, on the node whose service actor decided it',
      buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600],
      registers,
    });
  }

  /** Container services' cold starts (ContainerMetricsPort), on the node whose service actor saw them. */
  readonly containers = {
    coldStart: (ms: number): void => this.coldStartSeconds.observe(ms / 1000),
  };

  /** The actors' counters (TaskMetricsPort). */
  readonly tasks = {
    assigned: (queueWaitMs: number): void => this.queueWait.observe(queueWaitMs / 1000),
    finished: (status: 'completed' | 'failed' | 'cancelled'): void => this.finishedTotal.inc({ task_status: status }),
  };

  /** The HTTP edge's observer: counts the container gateway's requests (routes tagged 'gateway'). */
  observeRequest(route: RouteDef, status: number, seconds: number): void {
    if (route.tag !== 'gateway') return;
    const kind = route.path.startsWith('/r/invoke/') ? 'invoke' : route.path.startsWith('/agents/') ? 'agent_tunnel' : 'proxy';
    this.proxyRequests.inc({ route: kind, code: `${Math.floor(status / 100)}xx` });
    this.proxySeconds.observe({ route: kind }, seconds);
  }

  /** One snapshot per cacheMs, shared by every gauge of a scrape (and concurrent scrapes). */
  private snapshot(): Promise<OpsSnapshot> {
    const now = this.now();
    if (this.cache && now - this.cache.at < this.o.cacheMs) return this.cache.value;
    const value = this.o.ops.snapshot();
    this.cache = { at: now, value };
    // a failed snapshot is not kept: the next scrape tries again
    value.catch(() => {
      if (this.cache?.value === value) this.cache = null;
    });
    return value;
  }

  /** rows plus, at 0, the label sets of this metric seen within STALE_SERIES_MS that are absent now. */
  private withStale(metric: string, rows: Array<{ labels: Record<string, string>; value: number }>): Array<{ labels: Record<string, string>; value: number }> {
    const names = Object.keys(rows[0]?.labels ?? {});
    if (names.length === 0 && rows.length > 0) return rows;
    const now = this.now();
    let seen = this.seen.get(metric);
    if (!seen) this.seen.set(metric, (seen = new Map()));
    const keyOf = (l: Record<string, string>): string => JSON.stringify(Object.entries(l).sort());
    const present = new Set<string>();
    for (const r of rows) {
      const k = keyOf(r.labels);
      present.add(k);
      seen.set(k, { labels: r.labels, at: now });
    }
    const out = [...rows];
    for (const [k, v] of seen) {
      if (present.has(k)) continue;
      if (now - v.at > STALE_SERIES_MS) seen.delete(k);
      else out.push({ labels: v.labels, value: 0 });
    }
    return out;
  }
}
