import { pino, stdSerializers, type Logger, type DestinationStream } from 'pino';
import { dbErrorFrom, isRawDbError } from './errors.js';

export type { Logger };

/**
 * Field names whose values are secrets wherever they appear in a log object (top level, or one or
 * two levels down, e.g. `err.password_hash`, `body.user.password`): pino censors them.
 */
export const SECRET_FIELDS = [
  'password',
  'new_password',
  'current_password',
  'password_hash',
  'passwordHash',
  'secret',
  'secret_hash',
  'secretHash',
  'signing_secret',
  'signingSecret',
  'poll_secret',
  'poll_secret_hash',
  'client_secret',
  'token',
  'token_hash',
  'access_token',
  'refresh_token',
  'id_token',
  'api_key',
  'apiKey',
  'credential_value',
  'private_key',
  'authorization',
  'Authorization',
  'cookie',
  'Cookie',
  'set-cookie',
] as const;

/**
 * Error fields never logged: a driver error's `detail` (`Key (email)=(...) already exists`),
 * `where`, `hint`, internal query, and any query text or parameters a library attached.
 */
const DROPPED_ERROR_FIELDS = ['detail', 'where', 'hint', 'internalQuery', 'internalPosition', 'position', 'query', 'sql', 'sqlMessage', 'parameters', 'params', 'bindings', 'values'];

const key = (k: string): string => (/^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `["${k}"]`);
const redactPaths = SECRET_FIELDS.flatMap((k) => [key(k).replace(/^\./, ''), `*${key(k)}`, `*.*${key(k)}`]);

/**
 * The error as it may be logged. A raw database driver error anywhere in the cause chain is
 * replaced by its DbError (code, condition, table, constraint: no message, no values); the result
 * keeps the other errors' class, message, stack and fields.
 */
function safeError(e: Error, depth = 0): Error {
  if (isRawDbError(e)) return dbErrorFrom(e);
  const cause = (e as { cause?: unknown }).cause;
  if (depth > 8 || !(cause instanceof Error)) return e;
  const safeCause = safeError(cause, depth + 1);
  if (safeCause === cause) return e;
  const copy = Object.create(Object.getPrototypeOf(e) as object) as Error;
  for (const k of Object.getOwnPropertyNames(e)) if (k !== 'cause') Object.defineProperty(copy, k, { value: (e as unknown as Record<string, unknown>)[k], enumerable: Object.prototype.propertyIsEnumerable.call(e, k), writable: true, configurable: true });
  Object.defineProperty(copy, 'cause', { value: safeCause, enumerable: false, writable: true, configurable: true });
  return copy;
}

function strip(o: Record<string, unknown>): void {
  for (const f of DROPPED_ERROR_FIELDS) delete o[f];
  delete o.raw;
  for (const v of Object.values(o)) if (v && typeof v === 'object' && 'message' in v && 'stack' in v) strip(v as Record<string, unknown>);
  const agg = o.aggregateErrors;
  if (Array.isArray(agg)) for (const a of agg) if (a && typeof a === 'object') strip(a as Record<string, unknown>);
}

/** pino's error serializer, made safe: raw database errors replaced, value-bearing fields dropped. */
export function serializeError(e: unknown): unknown {
  if (!(e instanceof Error)) return e;
  const s = stdSerializers.err(safeError(e)) as unknown as Record<string, unknown>;
  strip(s);
  return s;
}

/** Structured JSON logs on stdout (pino). Child loggers carry request_id, actor, task_id... */
export function createLogger(level: string, dest?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      serializers: { err: serializeError, error: serializeError, cause: serializeError },
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-api-key"]', ...redactPaths], censor: '[redacted]' },
    },
    dest,
  );
}
