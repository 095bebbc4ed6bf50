import { STATUS_CODES } from 'node:http';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { AppError, type ErrorKind } from '../shared/errors.js';

/** The one place where error kinds become HTTP statuses (and gRPC codes for the agent stream). */
export const httpStatusOf: Record<ErrorKind, number> = {
  bad_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  gone: 410,
  precondition_failed: 412,
  payload_too_large: 413,
  rate_limited: 429,
  internal: 500,
  bad_gateway: 502,
  unavailable: 503,
  deadline_exceeded: 504,
};

export const grpcStatusOf: Record<ErrorKind, GrpcStatus> = {
  bad_request: GrpcStatus.INVALID_ARGUMENT,
  unauthorized: GrpcStatus.UNAUTHENTICATED,
  forbidden: GrpcStatus.PERMISSION_DENIED,
  not_found: GrpcStatus.NOT_FOUND,
  method_not_allowed: GrpcStatus.UNIMPLEMENTED,
  conflict: GrpcStatus.ALREADY_EXISTS,
  gone: GrpcStatus.NOT_FOUND,
  precondition_failed: GrpcStatus.FAILED_PRECONDITION,
  payload_too_large: GrpcStatus.RESOURCE_EXHAUSTED,
  rate_limited: GrpcStatus.RESOURCE_EXHAUSTED,
  internal: GrpcStatus.INTERNAL,
  bad_gateway: GrpcStatus.UNAVAILABLE,
  unavailable: GrpcStatus.UNAVAILABLE,
  deadline_exceeded: GrpcStatus.DEADLINE_EXCEEDED,
};

export interface ErrorBody {
  error_message: string;
  error_code: string;
}

export function toHttpError(e: unknown): { status: number; body: ErrorBody; headers: Record<string, string>; unexpected: boolean } {
  if (e instanceof AppError) {
    const headers: Record<string, string> = {};
    if (e.retryAfterS !== undefined) headers['Retry-After'] = String(Math.max(1, Math.ceil(e.retryAfterS)));
    return { status: httpStatusOf[e.kind], body: { ...e.fields, error_message: e.message, error_code: e.code }, headers, unexpected: e.kind === 'internal' };
  }
  return { status: 500, body: { error_message: 'internal server error', error_code: 'internal_error' }, headers: {}, unexpected: true };
}

/**
 * An error as a gRPC status (the agent stream's end status, a unary call's error) plus the
 * ServerError code the agent sees. Anything that is not an AppError becomes INTERNAL with a generic
 * message: its own message never reaches the peer.
 */
export function toGrpcError(e: unknown): { code: GrpcStatus; details: string; errorCode: string; unexpected: boolean } {
  if (e instanceof AppError) return { code: grpcStatusOf[e.kind], details: e.message, errorCode: e.code, unexpected: e.kind === 'internal' };
  return { code: GrpcStatus.INTERNAL, details: 'internal error', errorCode: 'internal_error', unexpected: true };
}

export const statusLine = (status: number): string => `${status} ${STATUS_CODES[status] ?? 'Unknown'}`;
