/**
 * Tracing helpers over @opentelemetry/api (W3C trace context). Off by default: until
 * enableTracing() was called (src/shared/tracing-sdk.ts does, when GANTRY_TRACING=otlp or a test
 * registers an in-memory exporter) every helper is a branch on one boolean and creates nothing, so
 * the tuned hot paths (submit, dispatch, progress) pay no span, no context switch and no
 * traceparent formatting.
 *
 * A task's trace survives the 202: the submit span's traceparent is stored with the task row
 * (tasks.trace_parent); the task actor's transition spans, the agent's execution span and the
 * completion span are parented on it (or on the traceparent the previous hop carried), so one run
 * is one trace from the HTTP request to the agent's result.
 */
import { context, propagation, trace, SpanKind, SpanStatusCode, ROOT_CONTEXT, type Attributes, type Context, type Span } from '@opentelemetry/api';

export { SpanKind };
export type { Span, Context, Attributes };

let enabled = false;
const NO_FIELDS: Record<string, string> = Object.freeze({}) as Record<string, string>;
const TRACER = 'gantry';

/** Whether spans are being made (a provider is registered). */
export function tracingEnabled(): boolean {
  return enabled;
}

/** Called by the SDK set-up once a tracer provider, context manager and propagator are registered. */
export function enableTracing(on: boolean): void {
  enabled = on;
}

const getter = { get: (c: Record<string, string>, k: string) => c[k], keys: (c: Record<string, string>) => Object.keys(c) };

/** The traceparent header value of ctx (default: the active context), or null when there is no valid span. */
export function traceparentOf(ctx?: Context): string | null {
  if (!enabled) return null;
  const carrier: Record<string, string> = {};
  propagation.inject(ctx ?? context.active(), carrier);
  return carrier.traceparent ?? null;
}

/** The traceparent of one span (its own context, not the active one). */
export function traceparentOfSpan(span: Span | null): string | null {
  return span ? traceparentOf(trace.setSpan(ROOT_CONTEXT, span)) : null;
}

/** A context whose parent is the given traceparent (ROOT when absent or invalid). */
export function contextFrom(traceparent: string | null | undefined, base: Context = ROOT_CONTEXT): Context {
  if (!enabled || !traceparent) return base;
  return propagation.extract(base, { traceparent }, getter);
}

export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  /** Parent: a traceparent string, a context, or (absent) the active context. */
  parent?: string | null | Context;
}

/** Starts a span (null when tracing is off). The caller ends it (endSpan). */
export function startSpan(name: string, o: SpanOptions = {}): Span | null {
  if (!enabled) return null;
  const parent = typeof o.parent === 'string' ? contextFrom(o.parent) : o.parent === null ? ROOT_CONTEXT : (o.parent ?? context.active());
  return trace.getTracer(TRACER).startSpan(name, { kind: o.kind ?? SpanKind.INTERNAL, ...(o.attributes ? { attributes: o.attributes } : {}) }, parent);
}

/** Marks a span failed (status ERROR + an exception event) without ending it. */
export function markSpanError(span: Span | null, err: unknown): void {
  if (!span || err === undefined || err === null) return;
  span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
  span.recordException(err instanceof Error ? err : String(err));
}

/** Ends a span, recording an error when given one. */
export function endSpan(span: Span | null, err?: unknown): void {
  if (!span) return;
  markSpanError(span, err);
  span.end();
}

/** Runs fn with span as the active span (so spans started inside, e.g. SQL, are its children). */
export function withActive<T>(span: Span | null, fn: () => T): T {
  if (!span) return fn();
  return context.with(trace.setSpan(context.active(), span), fn);
}

/**
 * Runs fn outside any span: work that outlives the caller or serves many callers (an actor's
 * mailbox drain, a group-commit batch) must not inherit whichever caller happened to start it.
 */
export function withoutSpan<T>(fn: () => T): T {
  if (!enabled) return fn();
  return context.with(ROOT_CONTEXT, fn);
}

/** trace_id/span_id of one span, for a log line written outside its context. */
export function spanLogFields(span: Span | null): Record<string, string> {
  if (!span) return NO_FIELDS;
  const sc = span.spanContext();
  return { trace_id: sc.traceId, span_id: sc.spanId };
}

/** Runs fn inside ctx (remoting: a delivered envelope's traceparent). */
export function withContext<T>(ctx: Context, fn: () => T): T {
  if (!enabled) return fn();
  return context.with(ctx, fn);
}

/** A span around an async function: started as a child of the active context, ended when fn settles. */
export async function inSpan<T>(name: string, o: SpanOptions, fn: (span: Span | null) => Promise<T>): Promise<T> {
  if (!enabled) return fn(null);
  const span = startSpan(name, o);
  try {
    const r = await withActive(span, () => fn(span));
    endSpan(span);
    return r;
  } catch (e) {
    endSpan(span, e);
    throw e;
  }
}

/** Whether a span is active now (SQL spans are only made inside a traced operation: no orphan root traces). */
export function hasActiveSpan(): boolean {
  return enabled && trace.getSpan(context.active()) !== undefined;
}

/** trace_id/span_id of the active span, for log lines (pino mixin); empty when none. */
export function logTraceFields(): Record<string, string> {
  if (!enabled) return NO_FIELDS;
  const sc = trace.getSpan(context.active())?.spanContext();
  if (!sc || sc.traceId === '00000000000000000000000000000000') return NO_FIELDS;
  return { trace_id: sc.traceId, span_id: sc.spanId };
}
