/**
 * Container services (interface spec "Container service"): request schemas, states and the record
 * as callers see it. The state machine is driven by the container-service actor
 * (src/actors/container); what each operation may start from is defined here, once.
 */
import { z } from 'zod';
import { WORKFLOW_SLUG_RE } from '../workflows/schema.js';

export const SERVICE_STATUSES = ['created', 'deploying', 'running', 'stopping', 'stopped', 'failed'] as const;
export type ServiceStatus = (typeof SERVICE_STATUSES)[number];
export const SERVICE_TYPES = ['deployed', 'external'] as const;
export type ServiceType = (typeof SERVICE_TYPES)[number];

/** What the agent reports about one replica. */
export const INSTANCE_STATES = ['pending', 'starting', 'running', 'stopped', 'failed', 'removed'] as const;
export type InstanceState = (typeof INSTANCE_STATES)[number];

export type ServiceOperation = 'deploy' | 'start' | 'stop' | 'undeploy' | 'delete';

/**
 * The states each operation may start from (anything else is 409 invalid_state):
 *  - deploy: created, stopped, failed -> deploying (fresh placement of replica_count replicas)
 *  - start: stopped, failed -> deploying (stopped instances are started again where they are)
 *  - stop: deploying, running -> stopping -> stopped (instances stopped, kept on their agents)
 *  - undeploy: deploying, running, stopped, failed -> stopping -> created (instances stopped and removed)
 *  - delete: created, stopped, failed (leftover instances are removed by their agents)
 * Running is reached from deploying when at least one replica is healthy; failed when no replica can
 * be placed or every replica failed. External services skip deploying/stopping (no instances).
 */
export const OPERATION_FROM: Record<ServiceOperation, readonly ServiceStatus[]> = {
  deploy: ['created', 'stopped', 'failed'],
  start: ['stopped', 'failed'],
  stop: ['deploying', 'running'],
  undeploy: ['deploying', 'running', 'stopped', 'failed'],
  delete: ['created', 'stopped', 'failed'],
};

export const SERVICE_SLUG_RE = WORKFLOW_SLUG_RE;
const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,199}$/;
const noCtl = (s: string): boolean => !/[\x00]/.test(s);
const absPath = z
  .string()
  .min(1)
  .max(1000)
  .refine((p) => p.startsWith('/'), 'must be an absolute path')
  .refine((p) => !p.split('/').includes('..'), 'must not contain ..')
  .refine(noCtl, 'must not contain NUL');
const urlPath = z
  .string()
  .max(1000)
  .refine((p) => p === '' || (p.startsWith('/') && !p.startsWith('//')), 'must be empty or a path starting with /');

/**
 * Session affinity (sticky sessions, src/gateway/affinity.ts): by a header the client sends
 * (rendezvous hashing, the same instance on every node) or by a cookie the gateway sets.
 */
export const SessionAffinitySchema = z.discriminatedUnion('mode', [
  z.object({ mode: z.literal('cookie') }).strict(),
  z.object({ mode: z.literal('header'), header_name: z.string().min(1).max(100).regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be an HTTP header name') }).strict(),
]);
export type SessionAffinity = z.infer<typeof SessionAffinitySchema>;

export const EnvVarSchema = z.object({ env_name: z.string().regex(ENV_NAME_RE, 'must be a shell variable name (A-Z a-z 0-9 _, not starting with a digit)'), env_value: z.string().max(32 * 1024) }).strict();
export const VolumeSchema = z.object({ host_path: absPath, container_path: absPath }).strict();

const fields = {
  service_slug: z.string().min(1).max(63).regex(SERVICE_SLUG_RE, 'must be lowercase letters and digits with single hyphens between groups (e.g. llm-server)'),
  display_name: z.string().trim().min(1).max(255),
  service_type: z.enum(SERVICE_TYPES),
  service_desc: z.string().max(10_000),
  docker_image: z.string().trim().min(1).max(1000),
  exposed_port: z.number().int().min(1).max(65535),
  health_path: urlPath,
  env_config: z
    .array(EnvVarSchema)
    .max(200)
    .refine((es) => new Set(es.map((e) => e.env_name)).size === es.length, 'an env_name appears twice'),
  volume_config: z.array(VolumeSchema).max(50),
  required_labels: z.array(z.string().trim().min(1).max(100)).max(64),
  gpu_count: z.number().int().min(-1, 'must be -1 (all GPUs), 0 or a count').max(64),
  replica_count: z.number().int().min(1).max(32),
  usage_prompt: z.string().max(10_000),
  openapi_url: urlPath,
  external_url: z
    .string()
    .max(2048)
    .refine((v) => v.startsWith('https://'), 'must be an absolute https:// URL')
    .refine((v) => URL.canParse(v) && !new URL(v).username && !new URL(v).password, 'must be a valid absolute URL without credentials'),
  external_auth_credential_id: z.uuid().nullable(),
  session_affinity: SessionAffinitySchema.nullable(),
  // autoscaling (an extension, src/actors/container/autoscale.ts): on when max_replicas is set
  min_replicas: z.number().int().min(0).max(32).nullable(),
  max_replicas: z.number().int().min(1).max(32).nullable(),
  target_inflight_per_replica: z.number().int().min(1).max(10_000).nullable(),
  idle_timeout_s: z.number().int().min(1).max(7 * 86_400).nullable(),
};

/** Defaults of the autoscaling fields left null while max_replicas is set. */
export const AUTOSCALE_DEFAULTS = { minReplicas: 1, targetInflight: 8, idleTimeoutS: 300 } as const;

export const CreateServiceBody = z
  .object({
    ...fields,
    service_type: fields.service_type.default('deployed'),
    service_desc: fields.service_desc.default(''),
    docker_image: fields.docker_image.optional(),
    exposed_port: fields.exposed_port.optional(),
    health_path: fields.health_path.default(''),
    env_config: fields.env_config.default([]),
    volume_config: fields.volume_config.default([]),
    required_labels: fields.required_labels.default([]),
    gpu_count: fields.gpu_count.default(0),
    replica_count: fields.replica_count.default(1),
    usage_prompt: fields.usage_prompt.default(''),
    openapi_url: fields.openapi_url.default(''),
    external_url: fields.external_url.optional(),
    external_auth_credential_id: fields.external_auth_credential_id.optional(),
    session_affinity: fields.session_affinity.default(null),
    min_replicas: fields.min_replicas.default(null),
    max_replicas: fields.max_replicas.default(null),
    target_inflight_per_replica: fields.target_inflight_per_replica.default(null),
    idle_timeout_s: fields.idle_timeout_s.default(null),
  })
  .strict()
  .superRefine((b, ctx) => {
    checkTypeRules(b, ctx);
    checkAutoscaleRules(b, ctx);
  });
export type CreateServiceBody = z.output<typeof CreateServiceBody>;

export const UpdateServiceBody = z
  .object(Object.fromEntries(Object.entries(fields).filter(([k]) => k !== 'service_type').map(([k, v]) => [k, v.optional()])) as { [K in Exclude<keyof typeof fields, 'service_type'>]: z.ZodOptional<(typeof fields)[K]> })
  .strict()
  .refine((b) => Object.values(b).some((v) => v !== undefined), 'at least one field is required');
export type UpdateServiceBody = z.output<typeof UpdateServiceBody>;

interface TypeFields {
  service_type: ServiceType;
  docker_image?: string | undefined;
  exposed_port?: number | undefined;
  external_url?: string | undefined;
  external_auth_credential_id?: string | null | undefined;
  session_affinity?: SessionAffinity | null | undefined;
  min_replicas?: number | null | undefined;
  max_replicas?: number | null | undefined;
  target_inflight_per_replica?: number | null | undefined;
  idle_timeout_s?: number | null | undefined;
}

/** The autoscaling fields of a service as they are (or will be after an update). */
export interface AutoscaleFields {
  service_type?: ServiceType;
  min_replicas?: number | null | undefined;
  max_replicas?: number | null | undefined;
  target_inflight_per_replica?: number | null | undefined;
  idle_timeout_s?: number | null | undefined;
}

/**
 * Autoscaling is on when max_replicas is set: min_replicas (default 1) must not exceed it; the
 * other fields need max_replicas; an external service has no replicas to scale.
 */
export function checkAutoscaleRules(b: AutoscaleFields, ctx: { addIssue(i: { code: 'custom'; message: string; path: string[] }): void }): void {
  const on = b.max_replicas !== null && b.max_replicas !== undefined;
  if (b.service_type === 'external') {
    for (const k of ['min_replicas', 'max_replicas', 'target_inflight_per_replica', 'idle_timeout_s'] as const)
      if (b[k] !== null && b[k] !== undefined) ctx.addIssue({ code: 'custom', message: 'is only for deployed services (an external service has no replicas)', path: [k] });
    return;
  }
  if (!on) {
    for (const k of ['min_replicas', 'target_inflight_per_replica', 'idle_timeout_s'] as const)
      if (b[k] !== null && b[k] !== undefined) ctx.addIssue({ code: 'custom', message: 'needs max_replicas (autoscaling is on when max_replicas is set)', path: [k] });
    return;
  }
  const min = b.min_replicas ?? AUTOSCALE_DEFAULTS.minReplicas;
  if (min > (b.max_replicas as number)) ctx.addIssue({ code: 'custom', message: `must not exceed max_replicas (${String(b.max_replicas)})`, path: ['min_replicas'] });
}

/** A service's effective autoscaling settings (null: fixed size, replica_count). */
export interface Autoscale {
  minReplicas: number;
  maxReplicas: number;
  targetInflight: number;
  idleTimeoutS: number;
}

export function autoscaleOf(s: Pick<ServiceRecord, 'type' | 'minReplicas' | 'maxReplicas' | 'targetInflight' | 'idleTimeoutS'>): Autoscale | null {
  if (s.type !== 'deployed' || s.maxReplicas === null) return null;
  return {
    minReplicas: s.minReplicas ?? AUTOSCALE_DEFAULTS.minReplicas,
    maxReplicas: s.maxReplicas,
    targetInflight: s.targetInflight ?? AUTOSCALE_DEFAULTS.targetInflight,
    idleTimeoutS: s.idleTimeoutS ?? AUTOSCALE_DEFAULTS.idleTimeoutS,
  };
}

/** deployed needs an image and a port and has no external_url; external needs an https URL and runs no image. */
export function checkTypeRules(b: TypeFields, ctx: { addIssue(i: { code: 'custom'; message: string; path: string[] }): void }): void {
  if (b.service_type === 'deployed') {
    if (!b.docker_image) ctx.addIssue({ code: 'custom', message: 'is required for a deployed service', path: ['docker_image'] });
    if (b.exposed_port === undefined) ctx.addIssue({ code: 'custom', message: 'is required for a deployed service', path: ['exposed_port'] });
    if (b.external_url) ctx.addIssue({ code: 'custom', message: 'is only for external services', path: ['external_url'] });
    if (b.external_auth_credential_id) ctx.addIssue({ code: 'custom', message: 'is only for external services', path: ['external_auth_credential_id'] });
  } else {
    if (!b.external_url) ctx.addIssue({ code: 'custom', message: 'is required for an external service', path: ['external_url'] });
    if (b.docker_image) ctx.addIssue({ code: 'custom', message: 'is only for deployed services', path: ['docker_image'] });
    if (b.session_affinity) ctx.addIssue({ code: 'custom', message: 'is only for deployed services (an external service has no instances)', path: ['session_affinity'] });
  }
}

export interface ServiceInstance {
  id: string;
  agentId: string;
  status: InstanceState;
  healthy: boolean;
  error: string;
  updatedAt: number;
  /** The spec revision it was started with (src/actors/container/rollout.ts specRevision; '' = unknown). */
  revision?: string;
}

/** The spec fields a replica runs (a change of them on a running service is rolled out). */
export interface ServiceSpec {
  image: string;
  exposedPort: number;
  healthPath: string;
  env: Array<{ env_name: string; env_value: string }>;
  gpuCount: number;
}

/** A rolling update's state (status_detail.rollout): `previous` is the spec to roll back to while rolling. */
export interface RolloutDetail {
  state: 'rolling' | 'completed' | 'rolled_back';
  from: string;
  to: string;
  updated: number;
  total: number;
  message: string;
  previous?: ServiceSpec;
}

/** The row as the store returns it. */
export interface ServiceRecord {
  id: string;
  teamId: string;
  slug: string;
  displayName: string;
  type: ServiceType;
  status: ServiceStatus;
  desc: string;
  image: string;
  exposedPort: number;
  healthPath: string;
  env: Array<{ env_name: string; env_value: string }>;
  volumes: Array<{ host_path: string; container_path: string }>;
  requiredLabels: string[];
  gpuCount: number;
  replicaCount: number;
  usagePrompt: string;
  openapiUrl: string;
  externalUrl: string;
  externalAuthCredentialId: string | null;
  sessionAffinity: SessionAffinity | null;
  /** Autoscaling (null max: fixed size); null fields take AUTOSCALE_DEFAULTS. */
  minReplicas: number | null;
  maxReplicas: number | null;
  targetInflight: number | null;
  idleTimeoutS: number | null;
  /**
   * The actor's last word on the deployment: {message, desired, placed, running, healthy}; with
   * autoscaling also the replicas being drained (ids: the gateway stops routing to them), the
   * last cold start's duration and why the last scale-up could not place a replica.
   */
  detail: { message?: string; desired?: number; placed?: number; running?: number; healthy?: number; draining?: string[]; lastColdStartMs?: number; coldStartAt?: number; scaleError?: string; rollout?: RolloutDetail };
  createdAt: number;
  updatedAt: number;
}

/**
 * The record as callers see it. `reduced` (sk- callers): env values are blanked (they may hold
 * secrets) and host paths of volumes are left out. Extra fields beyond the spec: deploy_status
 * (replicas desired/placed/running/healthy and the last message) and, on the management detail,
 * instance_list.
 */
export function serviceJson(s: ServiceRecord, reduced: boolean, instances?: ServiceInstance[]): Record<string, unknown> {
  const as = autoscaleOf(s);
  const out: Record<string, unknown> = {
    id: s.id,
    service_slug: s.slug,
    display_name: s.displayName,
    service_type: s.type,
    service_status: s.status,
    service_desc: s.desc,
    docker_image: s.image,
    exposed_port: s.exposedPort,
    health_path: s.healthPath,
    env_config: reduced ? s.env.map((e) => ({ env_name: e.env_name, env_value: '' })) : s.env,
    volume_config: reduced ? s.volumes.map((v) => ({ host_path: '', container_path: v.container_path })) : s.volumes,
    required_labels: s.requiredLabels,
    gpu_count: s.gpuCount,
    replica_count: s.replicaCount,
    usage_prompt: s.usagePrompt,
    openapi_url: s.openapiUrl,
    external_url: s.type === 'external' ? s.externalUrl : '',
    external_auth_credential_id: s.type === 'external' ? s.externalAuthCredentialId : null,
    session_affinity: s.sessionAffinity,
    min_replicas: as ? as.minReplicas : null,
    max_replicas: as ? as.maxReplicas : null,
    target_inflight_per_replica: as ? as.targetInflight : null,
    idle_timeout_s: as ? as.idleTimeoutS : null,
    deploy_status: {
      desired: s.type === 'external' ? 0 : as ? (s.detail.desired ?? as.minReplicas) : s.replicaCount,
      placed: s.detail.placed ?? 0,
      running: s.detail.running ?? 0,
      healthy: s.detail.healthy ?? 0,
      message: s.detail.message ?? '',
      ...(s.detail.rollout ? { rollout: { state: s.detail.rollout.state, from_revision: s.detail.rollout.from, to_revision: s.detail.rollout.to, updated: s.detail.rollout.updated, total: s.detail.rollout.total, message: s.detail.rollout.message } } : {}),
      ...(as ? { draining: s.detail.draining?.length ?? 0, last_cold_start_ms: s.detail.lastColdStartMs ?? null, last_cold_start_at: s.detail.coldStartAt ? new Date(s.detail.coldStartAt).toISOString() : null } : {}),
    },
    created_at: new Date(s.createdAt).toISOString(),
    updated_at: new Date(s.updatedAt).toISOString(),
  };
  if (instances)
    out.instance_list = instances.map((i) => ({ instance_id: i.id, agent_id: i.agentId, instance_status: i.status, healthy: i.healthy, instance_error: i.error, updated_at: new Date(i.updatedAt).toISOString(), spec_revision: i.revision ?? '', ...(as ? { draining: s.detail.draining?.includes(i.id) ?? false } : {}) }));
  return out;
}
