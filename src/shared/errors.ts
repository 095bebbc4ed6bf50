/**
 * The one error taxonomy. Every failure that reaches a caller is an AppError with a stable
 * lower_snake `code` and a `kind`; src/edge/error-map.ts is the only place that turns kinds into
 * HTTP statuses (and gRPC codes).
 */
export const ERROR_KINDS = [
  'bad_request',
  'unauthorized',
  'forbidden',
  'not_found',
  'method_not_allowed',
  'conflict',
  'gone',
  'precondition_failed',
  'payload_too_large',
  'rate_limited',
  'internal',
  'bad_gateway',
  'unavailable',
  // a peer did not do something in time (e.g. an agent stream without hello)
  'deadline_exceeded',
] as const;
export type ErrorKind = (typeof ERROR_KINDS)[number];

export class AppError extends Error {
  readonly kind: ErrorKind;
  readonly code: string;
  /** Seconds for a Retry-After header (429, 503). */
  readonly retryAfterS: number | undefined;
  /** Extra fields of the error body besides error_message and error_code (e.g. gpu_budget_exhausted's reset_at). */
  readonly fields: Record<string, string> | undefined;

  constructor(kind: ErrorKind, code: string, message: string, opts: { retryAfterS?: number; cause?: unknown; fields?: Record<string, string> } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AppError';
    this.kind = kind;
    this.code = code;
    this.retryAfterS = opts.retryAfterS;
    this.fields = opts.fields;
  }
}

export const badRequest = (code: string, message: string): AppError => new AppError('bad_request', code, message);
export const invalidParameter = (message: string): AppError => badRequest('invalid_parameter', message);
export const unauthorized = (code: string, message: string): AppError => new AppError('unauthorized', code, message);
export const forbidden = (code: string, message: string): AppError => new AppError('forbidden', code, message);
export const notFound = (what: string, code = 'not_found'): AppError => new AppError('not_found', code, `${what} not found`);
export const conflict = (code: string, message: string): AppError => new AppError('conflict', code, message);
export const gone = (code: string, message: string): AppError => new AppError('gone', code, message);
export const rateLimited = (retryAfterS: number, message = 'too many requests; retry later'): AppError =>
  new AppError('rate_limited', 'rate_limited', message, { retryAfterS });
export const unavailable = (code: string, message: string, retryAfterS?: number): AppError =>
  new AppError('unavailable', code, message, retryAfterS === undefined ? {} : { retryAfterS });
export const deadlineExceeded = (code: string, message: string): AppError => new AppError('deadline_exceeded', code, message);
export const badGateway = (code: string, message: string): AppError => new AppError('bad_gateway', code, message);

export function isAppError(e: unknown): e is AppError {
  return e instanceof AppError;
}

/**
 * Turns a zod error into a 400 whose message names the offending field path, e.g.
 * `display_name: Too big: expected string to have <=255 characters`.
 */
export function fromZodIssues(issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string; code?: string; keys?: readonly string[] }>, prefix = ''): AppError {
  const first = issues[0];
  if (first === undefined) return invalidParameter('invalid request body');
  const path = [...(prefix ? [prefix] : []), ...first.path.map(String)].join('.');
  let msg = first.message;
  if (first.code === 'unrecognized_keys' && first.keys) msg = `unknown field(s): ${first.keys.join(', ')}`;
  return invalidParameter(path ? `${path}: ${msg}` : msg);
}

/**
 * PostgreSQL condition names of the SQLSTATEs we meet (docs "PostgreSQL Error Codes"): a logged
 * database error names its condition instead of repeating the server's message, which may quote a
 * value (22P02 `invalid input syntax for type uuid: "..."`).
 */
const PG_CONDITIONS: Record<string, string> = {
  '08000': 'connection_exception',
  '08001': 'sqlclient_unable_to_establish_sqlconnection',
  '08003': 'connection_does_not_exist',
  '08004': 'sqlserver_rejected_establishment_of_sqlconnection',
  '08006': 'connection_failure',
  '08007': 'transaction_resolution_unknown',
  '08P01': 'protocol_violation',
  '22001': 'string_data_right_truncation',
  '22003': 'numeric_value_out_of_range',
  '22007': 'invalid_datetime_format',
  '22008': 'datetime_field_overflow',
  '22012': 'division_by_zero',
  '22021': 'character_not_in_repertoire',
  '22P02': 'invalid_text_representation',
  '22P05': 'untranslatable_character',
  '23502': 'not_null_violation',
  '23503': 'foreign_key_violation',
  '23505': 'unique_violation',
  '23514': 'check_violation',
  '23P01': 'exclusion_violation',
  '25P02': 'in_failed_sql_transaction',
  '40001': 'serialization_failure',
  '40P01': 'deadlock_detected',
  '42601': 'syntax_error',
  '42703': 'undefined_column',
  '42P01': 'undefined_table',
  '53300': 'too_many_connections',
  '54000': 'program_limit_exceeded',
  '55P03': 'lock_not_available',
  '57014': 'query_canceled',
  '57P01': 'admin_shutdown',
  '57P02': 'crash_shutdown',
  '57P03': 'cannot_connect_now',
  P0001: 'raise_exception',
};

export const pgCondition = (code: string): string => PG_CONDITIONS[code] ?? 'database_error';

/** The longest statement shape a DbError keeps. */
const STATEMENT_MAX = 200;

/**
 * The SHAPE of a statement, safe to log: its `?`/`$n` placeholders kept, every string literal
 * replaced by '?', whitespace collapsed, cut to STATEMENT_MAX characters. Parameter values never
 * reach it (callers pass the statement text before binding, never the driver's formatted query).
 */
export function statementShape(sql: string): string {
  const s = sql
    .replace(/\$\$[\s\S]*?\$\$/g, '$$$$?$$$$')
    .replace(/'(?:[^']|'')*'/g, "'?'")
    .replace(/\s+/g, ' ')
    .trim();
  return s.length > STATEMENT_MAX ? `${s.slice(0, STATEMENT_MAX)}...` : s;
}

/**
 * A database error as it may be logged: the SQLSTATE, its condition name, the table, column and
 * constraint it names, and the statement's shape. Never the driver's message (the PostgreSQL
 * driver's query builder writes the query with its parameters filled in into it), `detail`
 * (`Key (email)=(...) already exists`), `where`, `hint` or the parameters.
 */
export class DbError extends Error {
  readonly code: string;
  readonly condition: string;
  readonly table: string | undefined;
  readonly column: string | undefined;
  readonly constraint: string | undefined;
  readonly statement: string | undefined;

  constructor(o: { code: string; table?: string | undefined; column?: string | undefined; constraint?: string | undefined; statement?: string | undefined }) {
    const condition = pgCondition(o.code);
    const on = [o.constraint ? `constraint ${o.constraint}` : '', o.table ? `table ${o.table}` : '', o.column ? `column ${o.column}` : ''].filter(Boolean).join(', ');
    super(`database error ${o.code} ${condition}${on ? ` (${on})` : ''}`);
    this.name = 'DbError';
    this.code = o.code;
    this.condition = condition;
    this.table = o.table;
    this.column = o.column;
    this.constraint = o.constraint;
    this.statement = o.statement;
  }
}

const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/**
 * True for an error straight from the PostgreSQL driver (pg / PGlite: a SQLSTATE `code` plus
 * `severity`) or a MikroORM DriverException wrapping one (`sqlState`): its message and fields may
 * carry parameter values and must not be logged as they are.
 */
export function isRawDbError(e: unknown): e is Error & Record<string, unknown> {
  if (!(e instanceof Error) || e instanceof DbError) return false;
  const o = e as unknown as Record<string, unknown>;
  const code = o.code ?? o.sqlState;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && ('severity' in o || 'sqlState' in o || 'routine' in o);
}

/** A raw driver error as a DbError (statement: the statement text before binding, when known). */
export function dbErrorFrom(e: Error & Record<string, unknown>, statement?: string): DbError {
  return new DbError({
    code: str(e.code) ?? str(e.sqlState) ?? 'XX000',
    table: str(e.table),
    column: str(e.column),
    constraint: str(e.constraint),
    statement: statement === undefined ? undefined : statementShape(statement),
  });
}
