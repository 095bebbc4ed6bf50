/**
 * The OpenTelemetry SDK set-up of a process (a node or an agent): a tracer provider with the
 * AsyncLocalStorage context manager and the W3C trace-context + baggage propagators, registered
 * globally. Production exports over OTLP (protobuf over HTTP), configured by the standard OTEL_*
 * variables (OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, _HEADERS, _TIMEOUT,
 * OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG]); tests pass their own
 * exporter (an InMemorySpanExporter).
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { enableTracing } from './tracing.js';

export interface TracingOptions {
  /** service.name unless OTEL_SERVICE_NAME says otherwise ('gantry' for a node, 'gantry-agent' for an agent). */
  serviceName: string;
  serviceVersion?: string;
  /** Export here instead of OTLP (tests). Spans are then exported one by one (simple processor). */
  exporter?: SpanExporter;
  env?: Record<string, string | undefined>;
}

export interface TracingHandle {
  forceFlush(): Promise<void>;
  /** Flushes and unregisters (tracing off again). */
  shutdown(): Promise<void>;
}

/** OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG as the specification names them (default parentbased_always_on). */
export function samplerFromEnv(env: Record<string, string | undefined>): Sampler {
  const name = (env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on').trim().toLowerCase();
  const arg = Number(env.OTEL_TRACES_SAMPLER_ARG ?? '1');
  const ratio = Number.isFinite(arg) && arg >= 0 && arg <= 1 ? arg : 1;
  switch (name) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(ratio);
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) });
    default:
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

let current: TracingHandle | null = null;

/** Registers the SDK for this process (once; a second call returns the first handle). */
export function startTracing(o: TracingOptions): TracingHandle {
  if (current) return current;
  const env = o.env ?? process.env;
  const detected = detectResources({ detectors: [envDetector] });
  const resource = resourceFromAttributes({ 'service.name': o.serviceName, ...(o.serviceVersion ? { 'service.version': o.serviceVersion } : {}) }).merge(detected);
  const processor = o.exporter ? new SimpleSpanProcessor({ exporter: o.exporter }) : new BatchSpanProcessor({ exporter: new OTLPTraceExporter() });
  const provider = new TracerProvider({ resource, sampler: samplerFromEnv(env), spanProcessors: [processor] });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }));
  trace.setGlobalTracerProvider(provider);
  enableTracing(true);
  const handle: TracingHandle = {
    forceFlush: () => provider.forceFlush(),
    shutdown: async () => {
      if (current !== handle) return;
      current = null;
      enableTracing(false);
      await provider.shutdown();
      trace.disable();
      propagation.disable();
      context.disable();
    },
  };
  current = handle;
  return handle;
}
