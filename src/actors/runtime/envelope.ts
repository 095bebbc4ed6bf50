/**
 * The JSON codecs node-to-node remoting carries: one for envelopes (a message for an actor, with
 * its address, deadline and reply correlation) and one for errors (an AppError crosses the wire as
 * {kind, code, message, retry_after_s?}). Kind-agnostic: the codec is built over the protocol map's
 * message schemas (the kinds' zod unions), and a message is decoded by its target kind's schema, so
 * a message of another kind is rejected at the door.
 */
import { AppError, ERROR_KINDS, type ErrorKind } from '../../shared/errors.js';
import type { ActorRef, KindOf, MsgOf, ProtocolMap, ReplyOf } from '../ports.js';

/** What the codec needs of a message schema (a zod schema has it). */
export interface MessageSchema<M> {
  parse(v: unknown): M;
}

export type MessageSchemas<P extends ProtocolMap<P>> = { [K in KindOf<P>]: MessageSchema<MsgOf<P, K>> };

/** Each kind's reply schema per message type (what an ask of that type is answered with). */
export type ReplySchemas<P extends ProtocolMap<P>> = { [K in KindOf<P>]: { [T in MsgOf<P, K>['type']]: MessageSchema<ReplyOf<P, K, T>> } };

/** A message addressed to one actor, as it travels between nodes. */
export interface Envelope<P extends ProtocolMap<P>, K extends KindOf<P> = KindOf<P>> {
  target: ActorRef<K>;
  msg: MsgOf<P, K>;
  /** Absolute deadline of an ask (ms since the epoch). */
  deadline_ms?: number;
  /** Correlation id of an ask: the answer is routed back under it (absent for a tell). */
  reply?: string;
}

/** Any decoded envelope: a union over the kinds, so narrowing `target.kind` narrows `msg`. */
export type AnyEnvelope<P extends ProtocolMap<P>> = { [K in KindOf<P>]: Envelope<P, K> }[KindOf<P>];

const bad = (code: string, message: string): AppError => new AppError('bad_request', code, message);

function asRecord(v: unknown, what: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad('invalid_envelope', `${what} must be an object`);
  return v as Record<string, unknown>;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw bad('invalid_envelope', 'not JSON');
  }
}

export interface EnvelopeCodec<P extends ProtocolMap<P>> {
  encode<K extends KindOf<P>>(env: Envelope<P, K>): string;
  /** Parses and validates: the target kind must be known and the message must be one of its messages. */
  decode(text: string): AnyEnvelope<P>;
  /** Validates a message for a kind (the wire side of tell/ask, e.g. an agent's stream). */
  decodeMsg<K extends KindOf<P>>(kind: K, raw: unknown): MsgOf<P, K>;
  /** Validates the reply to an ask of this type that another node answered (an invalid one is an internal error). */
  decodeReply<K extends KindOf<P>, T extends MsgOf<P, K>['type']>(kind: K, type: T, raw: unknown): ReplyOf<P, K, T>;
}

/**
 * replies: the kinds' reply schemas (this service's codec always has them); a codec built without
 * them (a test protocol) passes remote replies through as they came.
 */
export function envelopeCodec<P extends ProtocolMap<P>>(schemas: MessageSchemas<P>, replies?: ReplySchemas<P>): EnvelopeCodec<P> {
  const isKind = (k: unknown): k is KindOf<P> => typeof k === 'string' && Object.prototype.hasOwnProperty.call(schemas, k);
  const decodeMsg = <K extends KindOf<P>>(kind: K, raw: unknown): MsgOf<P, K> => {
    try {
      return schemas[kind].parse(raw);
    } catch (e) {
      throw bad('invalid_message', `not a ${kind} message: ${firstIssue(e)}`);
    }
  };
  const decodeReply = <K extends KindOf<P>, T extends MsgOf<P, K>['type']>(kind: K, type: T, raw: unknown): ReplyOf<P, K, T> => {
    if (!replies) return raw as ReplyOf<P, K, T>;
    const schema: MessageSchema<ReplyOf<P, K, T>> = replies[kind][type];
    try {
      return schema.parse(raw);
    } catch (e) {
      throw new AppError('internal', 'invalid_reply', `a cluster node answered ${kind} ${type} with an invalid reply: ${firstIssue(e)}`);
    }
  };
  return {
    encode: (env) =>
      JSON.stringify({
        target: { kind: env.target.kind, id: env.target.id },
        msg: env.msg,
        ...(env.deadline_ms !== undefined ? { deadline_ms: env.deadline_ms } : {}),
        ...(env.reply !== undefined ? { reply: env.reply } : {}),
      }),
    decode: (text) => {
      const o = asRecord(parseJson(text), 'envelope');
      const target = asRecord(o.target, 'target');
      if (!isKind(target.kind)) throw bad('unknown_actor_kind', `unknown actor kind ${JSON.stringify(target.kind)}`);
      if (typeof target.id !== 'string' || target.id.length === 0) throw bad('invalid_envelope', 'target.id must be a non-empty string');
      if (o.deadline_ms !== undefined && (typeof o.deadline_ms !== 'number' || !Number.isFinite(o.deadline_ms))) throw bad('invalid_envelope', 'deadline_ms must be a number');
      if (o.reply !== undefined && typeof o.reply !== 'string') throw bad('invalid_envelope', 'reply must be a string');
      const kind = target.kind;
      const env: Envelope<P, typeof kind> = {
        target: { kind, id: target.id },
        msg: decodeMsg(kind, o.msg),
        ...(o.deadline_ms !== undefined ? { deadline_ms: o.deadline_ms as number } : {}),
        ...(o.reply !== undefined ? { reply: o.reply as string } : {}),
      };
      return env as AnyEnvelope<P>;
    },
    decodeMsg,
    decodeReply,
  };
}

/** The first issue of a zod error, as `path: message`. */
function firstIssue(e: unknown): string {
  const issues = (e as { issues?: Array<{ path: PropertyKey[]; message: string }> }).issues;
  const first = issues?.[0];
  const where = first && first.path.length > 0 ? `${first.path.map(String).join('.')}: ` : '';
  return `${where}${first?.message ?? 'invalid'}`;
}

// ---------------------------------------------------------------------------------------------
// Errors

/** An error as it crosses the wire. */
export interface WireError {
  kind: ErrorKind;
  code: string;
  message: string;
  retry_after_s?: number;
}

const INTERNAL: WireError = { kind: 'internal', code: 'internal_error', message: 'internal error' };

/** AppError -> wire; anything else becomes internal_error (its message may hold internals: never sent). */
export function errorToWire(e: unknown): WireError {
  if (!(e instanceof AppError)) return { ...INTERNAL };
  return { kind: e.kind, code: e.code, message: e.message, ...(e.retryAfterS !== undefined ? { retry_after_s: e.retryAfterS } : {}) };
}

/** Wire -> AppError; a malformed error becomes internal_error. */
export function errorFromWire(v: unknown): AppError {
  const o = typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
  const ok =
    typeof o.kind === 'string' &&
    (ERROR_KINDS as readonly string[]).includes(o.kind) &&
    typeof o.code === 'string' &&
    typeof o.message === 'string' &&
    (o.retry_after_s === undefined || (typeof o.retry_after_s === 'number' && Number.isFinite(o.retry_after_s)));
  const w = ok ? (o as unknown as WireError) : INTERNAL;
  return new AppError(w.kind, w.code, w.message, w.retry_after_s !== undefined ? { retryAfterS: w.retry_after_s } : {});
}

export const encodeError = (e: unknown): string => JSON.stringify(errorToWire(e));

export function decodeError(text: string): AppError {
  let v: unknown;
  try {
    v = JSON.parse(text) as unknown;
  } catch {
    v = null;
  }
  return errorFromWire(v);
}
