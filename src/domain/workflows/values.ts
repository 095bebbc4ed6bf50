/**
 * Value rules shared by workflow definition checks (defaults) and run-time parameter resolution:
 * type checks, bounds, options, file-kind matching and type inference. Pure; no I/O.
 *
 * Every checker returns a human-readable problem (without the field prefix) or null when the
 * value is fine, so callers can prefix it with the path they report (`parameters.steps: ...`,
 * `parameters[2] (steps): default ...`).
 */

export const PARAMETER_TYPES = ['string', 'integer', 'number', 'boolean', 'file', 'json'] as const;
export type ParameterType = (typeof PARAMETER_TYPES)[number];

/** Keys that must never be used as object keys we write into (prototype pollution). */
export const RESERVED_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

/** The subset of a ParameterDef the value checks look at. */
export interface ValueRules {
  type: ParameterType;
  min?: number | undefined;
  max?: number | undefined;
  options?: readonly string[] | undefined;
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Short description of a value for error messages: `string "abc"`, `1.5`, `null`, `an array`. */
export function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'nothing';
  if (typeof v === 'string') {
    const s = v.length > 60 ? `${v.slice(0, 60)}…` : v;
    return `string ${JSON.stringify(s)}`;
  }
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : `non-finite number ${String(v)}`;
  if (typeof v === 'boolean') return `boolean ${String(v)}`;
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  return `a ${typeof v}`;
}

function listForMessage(items: readonly string[], max = 20): string {
  const shown = items.slice(0, max).map((s) => JSON.stringify(s));
  return items.length > max ? `${shown.join(', ')}, … (${items.length} in all)` : shown.join(', ');
}

/** True for values JSON can carry: null, booleans, finite numbers, strings, arrays and plain objects. */
export function isJsonValue(v: unknown, depth = 0): boolean {
  if (depth > 64) return false;
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return true;
  if (typeof v === 'number') return Number.isFinite(v);
  if (Array.isArray(v)) return v.every((x) => isJsonValue(x, depth + 1));
  if (isPlainObject(v)) return Object.values(v).every((x) => isJsonValue(x, depth + 1));
  return false;
}

/**
 * Checks a value against its parameter rules. For type file only the shape (a non-empty file_key
 * string) is checked here; ownership, expiry and kind need the file lookup (see parameters.ts).
 */
export function checkValue(rules: ValueRules, value: unknown): string | null {
  switch (rules.type) {
    case 'integer':
    case 'number': {
      const isInt = rules.type === 'integer';
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        return `must be ${isInt ? 'an integer' : 'a number'} (got ${describeValue(value)})`;
      }
      if (isInt && !Number.isInteger(value)) return `must be an integer (got ${value})`;
      if (isInt && !Number.isSafeInteger(value)) {
        return `must be an integer between -${Number.MAX_SAFE_INTEGER} and ${Number.MAX_SAFE_INTEGER} (got ${value})`;
      }
      if (rules.min !== undefined && value < rules.min) return `must be >= ${rules.min} (got ${value})`;
      if (rules.max !== undefined && value > rules.max) return `must be <= ${rules.max} (got ${value})`;
      return null;
    }
    case 'string': {
      if (typeof value !== 'string') return `must be a string (got ${describeValue(value)})`;
      if (rules.options !== undefined && !rules.options.includes(value)) {
        return `must be one of ${listForMessage(rules.options)} (got ${describeValue(value)})`;
      }
      return null;
    }
    case 'boolean':
      return typeof value === 'boolean' ? null : `must be a boolean true or false (got ${describeValue(value)})`;
    case 'json':
      return isJsonValue(value) ? null : `must be a JSON value (got ${describeValue(value)})`;
    case 'file':
      return typeof value === 'string' && value.length > 0
        ? null
        : `must be a file_key string from POST /r/files/presign (got ${describeValue(value)})`;
  }
}

/** Type of a graph/spec value, or null when it cannot be inferred (null, links, undefined). */
export function inferType(v: unknown): ParameterType | null {
  if (typeof v === 'string') return 'string';
  if (typeof v === 'boolean') return 'boolean';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  if (Array.isArray(v) || isPlainObject(v)) return 'json';
  return null;
}

/**
 * Accepted file kinds: a MIME type (`image/png`), a MIME wildcard (`image/*`, `*\/*`) or a file
 * extension (`.png`, `.tar.gz`).
 */
const MIME_TOKEN = "[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*";
const ACCEPT_RE = new RegExp(`^(\\*/\\*|${MIME_TOKEN}/(\\*|${MIME_TOKEN})|\\.[A-Za-z0-9][A-Za-z0-9._-]*)$`);

export function isValidAcceptEntry(s: string): boolean {
  return s.length <= 255 && ACCEPT_RE.test(s);
}

/** Whether a staged file (its content type and name) matches one of the accepted kinds. */
export function fileKindMatches(accept: readonly string[], contentType: string, fileName: string): boolean {
  const mime = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  const name = fileName.toLowerCase();
  for (const raw of accept) {
    const a = raw.toLowerCase();
    if (a.startsWith('.')) {
      if (name.endsWith(a) && name.length > a.length) return true;
    } else if (a === '*/*') {
      return true;
    } else if (a.endsWith('/*')) {
      if (mime.startsWith(a.slice(0, -1))) return true;
    } else if (mime === a) {
      return true;
    }
  }
  return false;
}

/** Whether a value of `source` type may fill a parameter of `target` type through source_key. */
export function typesCompatible(source: ParameterType, target: ParameterType): boolean {
  return source === target || (target === 'json' && source !== 'file') || (source === 'integer' && target === 'number');
}
