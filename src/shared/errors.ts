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
  readonly details: Record<string, unknown> | undefined;
  /** Seconds for a Retry-After header (429, 503). */
  readonly retryAfterS: number | undefined;

  constructor(kind: ErrorKind, code: string, message: string, opts: { details?: Record<string, unknown>; retryAfterS?: number; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AppError';
    this.kind = kind;
    this.code = code;
    this.details = opts.details;
    this.retryAfterS = opts.retryAfterS;
  }
}

export const badRequest = (code: string, message: string, details?: Record<string, unknown>): AppError =>
  new AppError('bad_request', code, message, details === undefined ? {} : { details });
export const invalidParameter = (message: string, details?: Record<string, unknown>): AppError =>
  badRequest('invalid_parameter', message, details);
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
  return invalidParameter(path ? `${path}: ${msg}` : msg, { issues: issues.slice(0, 10).map((i) => ({ path: i.path.map(String).join('.'), message: i.message })) });
}
