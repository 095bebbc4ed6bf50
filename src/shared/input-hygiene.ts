import { badRequest, invalidParameter, type AppError } from './errors.js';

/**
 * The one input check every request goes through before a handler sees it: no string in a JSON
 * body (value or object key), query string or path parameter may hold U+0000 or an unpaired UTF-16
 * surrogate (PostgreSQL refuses both in text and jsonb, so they would otherwise surface as a 500),
 * a JSON body may not nest deeper than MAX_JSON_DEPTH, and no number may overflow to Infinity
 * (`1e400` parses as Infinity, which JSON cannot carry back). Decided here once, not per route.
 */
export const MAX_JSON_DEPTH = 64;

const BAD_CHARS = 'must not contain NUL characters or unpaired surrogates';

// a NUL, a high surrogate not followed by a low one, or a low surrogate not preceded by a high one
const BAD_RE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** True when s is safe to store: well-formed UTF-16 and no NUL. */
export function isCleanString(s: string): boolean {
  return !BAD_RE.test(s);
}

/** A name as it may appear in an error message: bounded, with bad characters escaped. */
function shown(s: string): string {
  const cut = s.length > 80 ? `${s.slice(0, 80)}...` : s;
  return isCleanString(cut) && /^[\w.-]*$/.test(cut) ? cut : JSON.stringify(cut);
}

const join = (path: string, seg: string | number): string => (path === '' ? String(seg) : `${path}.${seg}`);

/**
 * Walks a parsed JSON value and returns the first violation as a 400 `invalid_parameter` naming
 * the field path (`parameters.prompt: must not contain ...`), or null when the value is clean.
 * Recursion is bounded by MAX_JSON_DEPTH, so a hostile body cannot exhaust the stack.
 */
export function checkJsonValue(value: unknown, prefix = ''): AppError | null {
  const walk = (v: unknown, path: string, depth: number): AppError | null => {
    if (typeof v === 'string') return isCleanString(v) ? null : invalidParameter(`${path || 'body'}: ${BAD_CHARS}`);
    if (typeof v === 'number') return Number.isFinite(v) ? null : invalidParameter(`${path || 'body'}: number out of range`);
    if (v === null || typeof v !== 'object') return null;
    if (depth >= MAX_JSON_DEPTH) return invalidParameter(`${path || 'body'}: JSON nested deeper than ${MAX_JSON_DEPTH} levels`);
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const e = walk(v[i], join(path, i), depth + 1);
        if (e) return e;
      }
      return null;
    }
    for (const k of Object.keys(v)) {
      if (!isCleanString(k)) return invalidParameter(`${path || 'body'}: field name ${shown(k)} ${BAD_CHARS}`);
      const e = walk((v as Record<string, unknown>)[k], join(path, shown(k)), depth + 1);
      if (e) return e;
    }
    return null;
  };
  return walk(value, prefix, 0);
}

/** Checks decoded name/value pairs (query string, path parameters); `where` prefixes the message. */
export function checkPairs(pairs: Iterable<[string, string]>, where: string): AppError | null {
  for (const [k, v] of pairs) {
    if (!isCleanString(k)) return invalidParameter(`${where} ${shown(k)}: name ${BAD_CHARS}`);
    if (!isCleanString(v)) return invalidParameter(`${where} ${shown(k)}: ${BAD_CHARS}`);
  }
  return null;
}

/** Parses a query string into URLSearchParams, refusing NUL (`%00`) in any name or value. */
export function parseQuery(qs: string): URLSearchParams {
  const q = new URLSearchParams(qs);
  // fast path: without a percent-encoded NUL, decoding cannot produce one (invalid UTF-8 decodes to U+FFFD)
  if (qs.includes('%00') || qs.includes('\u0000')) {
    const e = checkPairs(q, 'query parameter');
    if (e) throw e;
  }
  return q;
}

/** Parses a JSON body text and applies checkJsonValue; malformed JSON is a 400 `malformed_json`. */
export function parseJsonBody(text: string): unknown {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (e) {
    throw badRequest('malformed_json', `malformed JSON body: ${(e as Error).message}`);
  }
  const bad = checkJsonValue(body);
  if (bad) throw bad;
  return body;
}
