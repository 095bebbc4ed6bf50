import { invalidParameter } from './errors.js';

export interface PageRequest {
  currentPage: number;
  perPage: number;
  offset: number;
}

export interface PageMeta {
  current_page: number;
  per_page: number;
  total_count: number;
}

const intParam = (q: URLSearchParams, name: string, def: number, min: number, max: number): number => {
  const raw = q.get(name);
  if (raw === null || raw === '') return def;
  if (!/^\d+$/.test(raw)) throw invalidParameter(`${name}: must be an integer between ${min} and ${max} (got ${JSON.stringify(raw)})`);
  const n = Number(raw);
  if (n < min || n > max) throw invalidParameter(`${name}: must be an integer between ${min} and ${max} (got ${raw})`);
  return n;
};

/** current_page >= 1 (default 1), per_page 1..100 (default 20); anything else is a 400. */
export function parsePage(q: URLSearchParams): PageRequest {
  const currentPage = intParam(q, 'current_page', 1, 1, 1_000_000);
  const perPage = intParam(q, 'per_page', 20, 1, 100);
  return { currentPage, perPage, offset: (currentPage - 1) * perPage };
}

export function pageMeta(p: PageRequest, totalCount: number): PageMeta {
  return { current_page: p.currentPage, per_page: p.perPage, total_count: totalCount };
}

/** `{ [name]: items, page_meta }` — the spec's paginated envelope. */
export function paged<T>(name: string, items: T[], p: PageRequest, totalCount: number): Record<string, unknown> {
  return { [name]: items, page_meta: pageMeta(p, totalCount) };
}
