/**
 * The one decoder of what an agent says on its stream: a zod union mirroring the `AgentMessage`
 * oneof of proto/agent/v1/agent.proto (as @grpc/proto-loader hands it over: keepCase, longs as
 * Number, defaults, `msg` naming the member that is set). Every message arriving on
 * AgentService.Connect goes through decodeAgentMessage before the server looks at it; a message
 * that does not decode ends the stream with INVALID_ARGUMENT (code invalid_message).
 *
 * Task reports (ack, provisioned, progress, failure) decode straight into the agent actor's own
 * message shapes: they are piped through the variants of AgentReportMsg (src/actors/agent/protocol.ts),
 * so progress bounds and stages are defined once, by the actor.
 */
import { z } from 'zod';
import { AgentReportMsg, type AgentReport } from '../../actors/agent/protocol.js';
import { AppError, fromZodIssues } from '../../shared/errors.js';
import { TOOL_TYPES } from '../../domain/tasks/record.js';
import type { AgentMessage__Output } from '../../protocol/agent-wire.js';

type ReportType = AgentReport['type'];
type ReportVariant<T extends ReportType> = Extract<(typeof AgentReportMsg.options)[number], { shape: { type: z.ZodLiteral<T> } }>;

/** The agent protocol's schema for one report type (a variant of AgentReportMsg, the actor's own). */
function reportSchema<T extends ReportType>(type: T): ReportVariant<T> {
  const v = AgentReportMsg.options.find((o) => o.shape.type.value === type);
  if (!v) throw new Error(`AgentReportMsg has no '${type}' message`);
  return v as ReportVariant<T>;
}

/** What the stream reports to the agent actor (the session adds its sessionId). */
const AckToActor = reportSchema('ack');
const ProvisionedToActor = reportSchema('provisioned');
const ProgressToActor = reportSchema('progress');
const FailedToActor = reportSchema('failed');

export const MACHINE_ID_RE = /^[A-Za-z0-9._:@-]{1,200}$/;
/** Outputs beyond this are not recorded (the agent presigns at most this many per call). */
export const MAX_OUTPUT_FILES = 100;

const u32 = z.number().int().min(0).max(0xffff_ffff);
/** uint64 as a JS number (longs: Number). */
const u64 = z.number().int().min(0);
/** Free text shown to people: kept, cut at max characters. */
const text = (max: number) => z.string().transform((s) => s.slice(0, max));
/** Telemetry: a value that is not a finite number (NaN from a failed probe) counts as 0. */
const gauge = z.number().catch(0);

const TaskRef = z.object({ task_id: z.string().min(1).max(100), attempt: u32.min(1), epoch: u64 });
const refOf = (r: z.output<typeof TaskRef>) => ({ taskId: r.task_id, attempt: r.attempt, epoch: r.epoch });
const ModelFile = z.object({ path: z.string().max(1000), size: u64 });
const modelPaths = z
  .array(ModelFile)
  .max(100_000)
  .transform((ms) => ms.map((m) => m.path).filter(Boolean));
const customNodes = z
  .array(z.string().max(200))
  .max(10_000)
  .transform((ns) => ns.filter(Boolean));

/** ComfyUI node class_types an agent lists (/object_info): at most 20,000 names of at most 200 characters. */
const nodeClasses = z
  .array(z.string().max(200))
  .max(20_000)
  .default([])
  .transform((cs) => [...new Set(cs.filter(Boolean))]);

/** Model paths an agent reports loaded (warm placement): at most 64, each at most 1000 characters. */
const loadedModels = z
  .array(z.string().max(1000))
  .max(10_000)
  .default([])
  .transform((ms) => [...new Set(ms.filter(Boolean))].slice(0, 64));

const Hello = z.object({
  machine_id: z.string().regex(MACHINE_ID_RE, '1-200 characters of A-Z a-z 0-9 . _ : @ -'),
  agent_version: z.string().max(100),
  display_name: z.string().max(255),
  labels: z
    .array(z.string().max(100))
    .max(1000)
    .transform((ls) => [...new Set(ls.map((l) => l.trim()).filter(Boolean))].slice(0, 64)),
  gpus: z
    .array(z.object({ name: z.string().max(200), vram_gb: z.number().nonnegative() }))
    .max(64)
    .transform((gs) => gs.map((g) => ({ name: g.name || 'GPU', vram_gb: g.vram_gb }))),
  models: modelPaths,
  custom_nodes: customNodes,
  /** 0 (unset) = 1; at most 256. */
  slots: u32.transform((n) => Math.min(256, Math.max(1, n))),
  running: z.array(TaskRef).max(10_000).transform((rs) => rs.map(refOf)),
  executor: z.string().max(100),
  /** 0 = the server's default. */
  window: u32,
  draining: z.boolean(),
  container_runtime: z.enum(['', 'docker', 'exec']).catch(''),
  containers: z.array(z.lazy(() => ContainerReport)).max(10_000),
  tunnel: z.boolean(),
  /** Unknown values are dropped (a newer agent's tool); empty = derived from `executor`. */
  tool_types: z
    .array(z.string().max(100))
    .max(64)
    .default([])
    .transform((ts) => [...new Set(ts.filter((t) => (TOOL_TYPES as readonly string[]).includes(t)))]),
  loaded_models: loadedModels,
  node_classes: nodeClasses,
});

const ContainerReport = z.object({
  instance_id: z.string().min(1).max(100),
  service_id: z.string().min(1).max(100),
  state: z.enum(['starting', 'running', 'stopped', 'failed', 'removed']),
  healthy: z.boolean(),
  error: text(20_000),
});

const Heartbeat = z.object({
  cpu_percent: gauge.transform((n) => Math.round(n * 10) / 10),
  ram_used_bytes: gauge.transform((n) => Math.max(0, Math.floor(n))),
  ram_total_bytes: gauge.transform((n) => Math.max(0, Math.floor(n))),
  gpus: z
    .array(
      z.object({
        index: u32,
        name: z.string().max(200),
        utilization_percent: gauge.transform((n) => Math.max(0, Math.min(100, n))),
        vram_used_gb: gauge.transform((n) => Math.max(0, n)),
        vram_total_gb: gauge.transform((n) => Math.max(0, n)),
        temperature_c: gauge,
      }),
    )
    .max(64),
  running_tasks: u32,
  loaded_models: loadedModels,
});

const Ack = TaskRef.transform((r) => ({ type: 'ack' as const, ...refOf(r) })).pipe(AckToActor);
const Provisioned = TaskRef.transform((r) => ({ type: 'provisioned' as const, ...refOf(r) })).pipe(ProvisionedToActor);

const Progress = z
  .object({
    ...TaskRef.shape,
    /** 0..1; float noise just outside is clamped. */
    progress: z.number().transform((n) => Math.max(0, Math.min(1, n))),
    step_current: u32,
    step_total: u32,
    current_node: text(500),
    /** "" = none; anything else must be one of the actor's stages. */
    stage: z.string().max(40),
    message: text(2000),
  })
  .transform((p) => ({
    type: 'progress' as const,
    ...refOf(p),
    progress: {
      progress: p.progress,
      step_current: p.step_current,
      step_total: p.step_total,
      current_node: p.current_node,
      ...(p.stage ? { stage: p.stage } : {}),
      ...(p.message ? { message: p.message } : {}),
    },
  }))
  .pipe(ProgressToActor);

/** extra_json: a JSON object merged into the task output; anything else (or "") adds nothing. */
const JsonObject = z.record(z.string(), z.json());
const ExtraJson = z
  .string()
  .max(1024 * 1024)
  .transform((s, ctx): z.input<typeof JsonObject> => {
    if (!s) return {};
    try {
      // checked by the pipe below
      return JSON.parse(s) as z.input<typeof JsonObject>;
    } catch {
      ctx.addIssue({ code: 'custom', message: 'not JSON' });
      return z.NEVER;
    }
  })
  .pipe(JsonObject)
  .catch({});

/** A W3C traceparent from the agent (tracing): a malformed one is dropped, never a reason to refuse the message. */
const Traceparent = z
  .string()
  .max(64)
  .regex(/^(?:[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2})?$/)
  .catch('');

const Result = z.object({
  ...TaskRef.shape,
  storage_key: z.string().max(1024),
  storage_keys: z.array(z.string().max(1024)).max(10_000),
  image_count: u32,
  outputs: z
    .array(z.object({ name: text(200), storage_key: z.string().max(1024), content_type: text(255), size: u64 }))
    .max(10_000)
    .transform((os) => os.slice(0, MAX_OUTPUT_FILES)),
  extra_json: ExtraJson,
  traceparent: Traceparent,
});

const Failure = z
  .object({ ...TaskRef.shape, error: text(4000), code: z.string().max(100), traceparent: Traceparent })
  .transform((f) => ({ type: 'failed' as const, ...refOf(f), error: f.error || 'the agent reported a failure without a message', ...(f.traceparent ? { traceparent: f.traceparent } : {}) }))
  .pipe(FailedToActor);

const Inventory = z.object({ models: modelPaths, custom_nodes: customNodes, node_classes: nodeClasses });

/** Every message an agent may send, by the oneof member that is set. */
export const AgentStreamMessage = z.discriminatedUnion('msg', [
  z.object({ msg: z.literal('hello'), hello: Hello }),
  z.object({ msg: z.literal('heartbeat'), heartbeat: Heartbeat }),
  z.object({ msg: z.literal('ack'), ack: Ack }),
  z.object({ msg: z.literal('provisioned'), provisioned: Provisioned }),
  z.object({ msg: z.literal('progress'), progress: Progress }),
  z.object({ msg: z.literal('result'), result: Result }),
  z.object({ msg: z.literal('failure'), failure: Failure }),
  z.object({ msg: z.literal('credit'), credit: z.object({ grant: u32 }) }),
  z.object({ msg: z.literal('inventory'), inventory: Inventory }),
  z.object({ msg: z.literal('status'), status: z.object({ draining: z.boolean() }) }),
  z.object({ msg: z.literal('container'), container: ContainerReport }),
  // no member we know is set (a newer agent's message): ignored, still credited
  z.object({ msg: z.undefined().optional() }),
]);
export type AgentStreamMessage = z.output<typeof AgentStreamMessage>;
export type HelloMessage = z.output<typeof Hello>;
export type HeartbeatMessage = z.output<typeof Heartbeat>;
export type ResultMessage = z.output<typeof Result>;
export type ContainerReportMessage = z.output<typeof ContainerReport>;
/** What a stream reports to the agent actor (AgentSessions.fromAgent): the agent protocol's AgentReportMsg. */
export type { AgentReport };

// ---------------------------------------------------------------------------------------------
// unary requests

const OUTPUT_NAME_RE = /^[A-Za-z0-9._-]{1,200}$/;
const MAX_OUTPUT_BYTES = 5 * 1024 ** 3;
const SessionTaskRef = z.object({ session_id: z.string().max(100), ...TaskRef.shape });

/** PresignInputs: the session and the task it holds (attempt, epoch). */
export const PresignInputsRequest = SessionTaskRef;
/** PresignOutputs: plus 1-100 plain file names, each at most 5 GB, no name twice. */
export const PresignOutputsRequest = z.object({
  ...SessionTaskRef.shape,
  files: z
    .array(
      z.object({
        name: z
          .string()
          .regex(OUTPUT_NAME_RE, 'must be 1-200 characters of A-Z a-z 0-9 . _ -')
          .refine((n) => n !== '.' && n !== '..', 'must not be . or ..'),
        size: u64.max(MAX_OUTPUT_BYTES, 'must be at most 5 GB'),
        content_type: z
          .string()
          .max(255)
          .transform((c) => c || 'application/octet-stream'),
      }),
    )
    .min(1, `must list 1-${MAX_OUTPUT_FILES} files`)
    .max(MAX_OUTPUT_FILES, `must list 1-${MAX_OUTPUT_FILES} files`)
    .refine((fs) => new Set(fs.map((f) => f.name)).size === fs.length, 'a file name appears twice'),
});

/** PresignCheckpoint: plus the archive's size (0 = download URL only), at most 5 GB. */
export const PresignCheckpointRequest = z.object({ ...SessionTaskRef.shape, size: u64.max(MAX_OUTPUT_BYTES, 'must be at most 5 GB'), step: u32 });
/** CommitCheckpoint: the key PresignCheckpoint gave and the checkpoint's training step. */
export const CommitCheckpointRequest = z.object({ ...SessionTaskRef.shape, storage_key: z.string().min(1).max(1024), step: u32 });

/** Decodes a unary request; a bad one is a 400-kind AppError (INVALID_ARGUMENT) naming the field. */
export function decodeRequest<S extends z.ZodType>(schema: S, raw: z.input<S>): z.output<S> {
  const r = schema.safeParse(raw);
  if (!r.success) throw fromZodIssues(r.error.issues);
  return r.data;
}

/** Decodes one message from the stream; a bad one is a bad_request AppError (code invalid_message). */
export function decodeAgentMessage(raw: AgentMessage__Output): { ok: true; msg: AgentStreamMessage } | { ok: false; error: AppError } {
  const r = AgentStreamMessage.safeParse(raw);
  if (r.success) return { ok: true, msg: r.data };
  return { ok: false, error: new AppError('bad_request', 'invalid_message', fromZodIssues(r.error.issues).message) };
}
