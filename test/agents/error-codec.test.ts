/**
 * The one error codec (src/edge/error-map.ts): every AppError kind has an HTTP status and a gRPC
 * code, AppErrors keep their code and message, and anything else is an opaque internal error on
 * both transports (its message never reaches the caller or the agent).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { AppError, ERROR_KINDS } from '../../src/shared/errors.js';
import { grpcStatusOf, httpStatusOf, toGrpcError, toHttpError } from '../../src/edge/error-map.js';

const grpcCodes = new Set(Object.values(GrpcStatus).filter((v): v is number => typeof v === 'number'));

test('every error kind has an HTTP error status and a non-OK gRPC code', () => {
  assert.ok(ERROR_KINDS.length >= 14);
  for (const kind of ERROR_KINDS) {
    const http = httpStatusOf[kind];
    assert.ok(Number.isInteger(http) && http >= 400 && http <= 599, `${kind}: HTTP ${http}`);
    const g = grpcStatusOf[kind];
    assert.ok(grpcCodes.has(g) && g !== GrpcStatus.OK, `${kind}: gRPC ${g}`);
    const e = new AppError(kind, `some_${kind}`, `message of ${kind}`);
    assert.deepEqual(toGrpcError(e), { code: g, details: `message of ${kind}`, errorCode: `some_${kind}`, unexpected: kind === 'internal' });
    const h = toHttpError(e);
    assert.equal(h.status, http);
    assert.deepEqual(h.body, { error_message: `message of ${kind}`, error_code: `some_${kind}` });
  }
  // the maps hold exactly the kinds (no stale entries)
  assert.deepEqual(Object.keys(httpStatusOf).sort(), [...ERROR_KINDS].sort());
  assert.deepEqual(Object.keys(grpcStatusOf).sort(), [...ERROR_KINDS].sort());
});

test('the agent stream statuses: each end reason maps to the gRPC code agents and tests rely on', () => {
  const cases: Array<[AppError, GrpcStatus]> = [
    [new AppError('unavailable', 'server_shutting_down', 'x'), GrpcStatus.UNAVAILABLE],
    [new AppError('unavailable', 'heartbeat_missed', 'x'), GrpcStatus.UNAVAILABLE],
    [new AppError('not_found', 'agent_deleted', 'x'), GrpcStatus.NOT_FOUND],
    [new AppError('unauthorized', 'credential_revoked', 'x'), GrpcStatus.UNAUTHENTICATED],
    [new AppError('rate_limited', 'window_exceeded', 'x'), GrpcStatus.RESOURCE_EXHAUSTED],
    [new AppError('conflict', 'session_replaced', 'x'), GrpcStatus.ALREADY_EXISTS],
    [new AppError('forbidden', 'session_revoked', 'x'), GrpcStatus.PERMISSION_DENIED],
    [new AppError('deadline_exceeded', 'hello_timeout', 'x'), GrpcStatus.DEADLINE_EXCEEDED],
    [new AppError('bad_request', 'invalid_message', 'x'), GrpcStatus.INVALID_ARGUMENT],
  ];
  for (const [e, code] of cases) assert.equal(toGrpcError(e).code, code, e.code);
  assert.equal(httpStatusOf.deadline_exceeded, 504);
});

test('an unknown error is 500 internal_error / INTERNAL without leaking its message', () => {
  for (const thrown of [new Error('password=hunter2 at db.internal:5432'), 'a string', { message: 'object secret' }, null]) {
    const h = toHttpError(thrown);
    assert.equal(h.status, 500);
    assert.deepEqual(h.body, { error_message: 'internal server error', error_code: 'internal_error' });
    assert.equal(h.unexpected, true);
    const g = toGrpcError(thrown);
    assert.deepEqual(g, { code: GrpcStatus.INTERNAL, details: 'internal error', errorCode: 'internal_error', unexpected: true });
    assert.ok(!JSON.stringify([h, g]).includes('secret') && !JSON.stringify([h, g]).includes('hunter2'));
  }
});
