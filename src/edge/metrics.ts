import client from 'prom-client';
import type { RuntimeMetrics } from '../actors/runtime/system.js';
import type { RouteDef } from './http.js';

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
const depth = new client.Gauge({ name: 'gantry_actor_mailbox_depth', help: 'Messages waiting in actor mailboxes', labelNames: ['kind'], registers: [registry] });
const active = new client.Gauge({ name: 'gantry_actor_activations', help: 'Active actors', labelNames: ['kind'], registers: [registry] });

export const actorMetrics: RuntimeMetrics = {
  turn: (kind, ms, ok) => turns.observe({ kind, ok: ok ? 'true' : 'false' }, ms / 1000),
  depth: (kind, delta) => depth.inc({ kind }, delta),
  activations: (kind, delta) => active.inc({ kind }, delta),
};

/** GET /metrics (outside /api/v1): Prometheus text format. */
export function metricsRoute(): RouteDef {
  return {
    method: 'GET',
    path: '/metrics',
    absolute: true,
    doc: { summary: 'Prometheus metrics', tags: ['system'], responses: { 200: { contentType: 'text/plain' } } },
    auth: { kinds: 'public' },
    stream: async (_c, res) => {
      const body = await registry.metrics();
      res.writeHead(200, { 'Content-Type': registry.contentType });
      res.end(body);
    },
  };
}
