import { parsePage, paged } from '../../shared/pagination.js';
import { invalidParameter } from '../../shared/errors.js';
import type { RouteDef } from '../http.js';

/**
 * Diagnostic routes, mounted only when GANTRY_DEBUG_ROUTES=true (tests of the edge itself: slow
 * requests for graceful shutdown, an unexpected exception, body echo, the pagination helper).
 */
export function debugRoutes(): RouteDef[] {
  return hide([
    { method: 'POST', path: '/_debug/echo', auth: { kinds: 'public' }, handler: async (c) => ({ body: c.body ?? null }) },
    {
      method: 'GET',
      path: '/_debug/sleep',
      auth: { kinds: 'public' },
      handler: async (c) => {
        const ms = Number(c.query.get('ms') ?? '100');
        if (!Number.isFinite(ms) || ms < 0 || ms > 60_000) throw invalidParameter('ms: must be 0..60000');
        await new Promise((r) => setTimeout(r, ms));
        return { slept_ms: ms };
      },
    },
    {
      method: 'GET',
      path: '/_debug/throw',
      auth: { kinds: 'public' },
      handler: async () => {
        throw new TypeError('boom (debug route)');
      },
    },
    {
      method: 'GET',
      path: '/_debug/items',
      auth: { kinds: 'public' },
      handler: async (c) => {
        const p = parsePage(c.query);
        const total = 45;
        const items = Array.from({ length: Math.max(0, Math.min(p.perPage, total - p.offset)) }, (_, i) => ({ n: p.offset + i + 1 }));
        return paged('item_list', items, p, total);
      },
    },
  ]);
}

/** Debug routes are left out of the OpenAPI document. */
const hide = (defs: RouteDef[]): RouteDef[] => defs.map((d) => ({ ...d, doc: { hidden: true, summary: d.path, tags: ['debug'], responses: {} } }));
