/**
 * Container services and their instances in PostgreSQL (Migration20261124000700_containers).
 * Routes create, update and delete definitions; the service's status, deploy detail and instances
 * are written only by its container-service actor.
 */
import { z } from 'zod';
import type { Database } from './db.js';
import { q, json, ts } from './sql.js';
import { isRecord, jsonArrayOf, jsonObject, jsonStrings, type PgTimestamp } from './rows.js';
import { uuidv7 } from '../shared/ids.js';
import { appendAudit, audited } from './audit.js';
import type { AuditNote } from '../shared/audit.js';
import { conflict } from '../shared/errors.js';
import type { ContainerStorePort } from '../actors/ports.js';
import { SessionAffinitySchema, type CreateServiceBody, type InstanceState, type ServiceInstance, type ServiceRecord, type ServiceSpec, type ServiceStatus, type ServiceType, type UpdateServiceBody } from '../domain/containers/schema.js';

/** An online agent as placement needs it. */
export interface PlacementAgent {
  id: string;
  labels: string[];
  gpuCount: number;
  runtime: string;
  status: string;
}

/** A `container_services` row (select * / returning *). */
interface ServiceRow {
  id: string;
  team_id: string;
  service_slug: string;
  display_name: string;
  service_type: ServiceType;
  service_status: ServiceStatus;
  service_desc: string;
  docker_image: string;
  exposed_port: number;
  health_path: string;
  env_config: unknown;
  volume_config: unknown;
  required_labels: unknown;
  gpu_count: number;
  replica_count: number;
  usage_prompt: string;
  openapi_url: string;
  external_url: string;
  external_auth_credential_id: string | null;
  session_affinity: unknown;
  min_replicas: number | null;
  max_replicas: number | null;
  target_inflight_per_replica: number | null;
  idle_timeout_s: number | null;
  status_detail: unknown;
  created_by: string | null;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
}

/** A `container_instances` row (select *). */
interface InstanceRow {
  id: string;
  service_id: string;
  team_id: string;
  agent_id: string;
  instance_status: InstanceState;
  healthy: boolean;
  instance_error: string;
  spec_revision: string;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
}

const SpecSchema = z.object({ image: z.string(), exposedPort: z.number(), healthPath: z.string(), env: z.array(z.object({ env_name: z.string(), env_value: z.string() })), gpuCount: z.number() });
const RolloutDetailSchema = z.object({ state: z.enum(['rolling', 'completed', 'rolled_back']), from: z.string(), to: z.string(), updated: z.number(), total: z.number(), message: z.string(), previous: SpecSchema.optional() });

type EnvVar = ServiceRecord['env'][number];
type Volume = ServiceRecord['volumes'][number];
const isEnvVar = (x: unknown): x is EnvVar => isRecord(x) && typeof x.env_name === 'string' && typeof x.env_value === 'string';
const isVolume = (x: unknown): x is Volume => isRecord(x) && typeof x.host_path === 'string' && typeof x.container_path === 'string';

/**
 * status_detail: the actor's {message, desired, placed, running, healthy}, each field only when it
 * has its type, in the stored key order (the actor compares details by their JSON text).
 */
function rowDetail(v: unknown): ServiceRecord['detail'] {
  const d: ServiceRecord['detail'] = {};
  for (const [k, x] of Object.entries(jsonObject(v))) {
    if (k === 'message' && typeof x === 'string') d.message = x;
    else if ((k === 'desired' || k === 'placed' || k === 'running' || k === 'healthy' || k === 'lastColdStartMs' || k === 'coldStartAt') && typeof x === 'number') d[k] = x;
    else if (k === 'scaleError' && typeof x === 'string') d.scaleError = x;
    else if (k === 'draining' && Array.isArray(x)) d.draining = x.filter((v): v is string => typeof v === 'string');
    else if (k === 'rollout') {
      const r = RolloutDetailSchema.safeParse(x);
      if (r.success) d.rollout = r.data;
    }
  }
  return d;
}

const rowToService = (r: ServiceRow): ServiceRecord => ({
  id: r.id,
  teamId: r.team_id,
  slug: r.service_slug,
  displayName: r.display_name,
  type: r.service_type,
  status: r.service_status,
  desc: r.service_desc,
  image: r.docker_image,
  exposedPort: r.exposed_port,
  healthPath: r.health_path,
  env: jsonArrayOf(r.env_config, isEnvVar),
  volumes: jsonArrayOf(r.volume_config, isVolume),
  requiredLabels: jsonStrings(r.required_labels),
  gpuCount: r.gpu_count,
  replicaCount: r.replica_count,
  usagePrompt: r.usage_prompt,
  openapiUrl: r.openapi_url,
  externalUrl: r.external_url,
  externalAuthCredentialId: r.external_auth_credential_id ?? null,
  sessionAffinity: SessionAffinitySchema.safeParse(r.session_affinity).data ?? null,
  minReplicas: r.min_replicas ?? null,
  maxReplicas: r.max_replicas ?? null,
  targetInflight: r.target_inflight_per_replica ?? null,
  idleTimeoutS: r.idle_timeout_s ?? null,
  detail: rowDetail(r.status_detail),
  createdAt: ts(r.created_at) ?? 0,
  updatedAt: ts(r.updated_at) ?? 0,
});

const rowToInstance = (r: InstanceRow): ServiceInstance => ({
  id: r.id,
  agentId: r.agent_id,
  status: r.instance_status,
  healthy: r.healthy,
  error: r.instance_error,
  updatedAt: ts(r.updated_at) ?? 0,
  revision: r.spec_revision ?? '',
});

function isUniqueViolation(e: unknown): boolean {
  const err = e as { code?: string; cause?: { code?: string } } | null;
  return err?.code === '23505' || err?.cause?.code === '23505';
}
const slugTaken = (slug: string) => conflict('service_slug_taken', `service_slug ${slug} is already used by another service of this team`);

const COLUMNS: Record<keyof UpdateServiceBody, [column: string, cast?: string]> = {
  service_slug: ['service_slug'],
  display_name: ['display_name'],
  service_desc: ['service_desc'],
  docker_image: ['docker_image'],
  exposed_port: ['exposed_port'],
  health_path: ['health_path'],
  env_config: ['env_config', 'jsonb'],
  volume_config: ['volume_config', 'jsonb'],
  required_labels: ['required_labels', 'jsonb'],
  gpu_count: ['gpu_count'],
  replica_count: ['replica_count'],
  usage_prompt: ['usage_prompt'],
  openapi_url: ['openapi_url'],
  external_url: ['external_url'],
  external_auth_credential_id: ['external_auth_credential_id'],
  session_affinity: ['session_affinity', 'jsonb'],
  min_replicas: ['min_replicas'],
  max_replicas: ['max_replicas'],
  target_inflight_per_replica: ['target_inflight_per_replica'],
  idle_timeout_s: ['idle_timeout_s'],
};

export class PgContainerStore implements ContainerStorePort {
  constructor(private readonly db: Database) {}

  private get q() {
    return q(this.db);
  }

  async create(teamId: string, b: CreateServiceBody, createdBy: string | null, audit?: AuditNote): Promise<string> {
    const id = uuidv7();
    try {
      await audited(this.db, audit, async (tq, record) => {
        await tq(
        `insert into container_services (id, team_id, service_slug, display_name, service_type, service_status, service_desc, docker_image, exposed_port, health_path, env_config, volume_config, required_labels, gpu_count, replica_count, usage_prompt, openapi_url, external_url, external_auth_credential_id, session_affinity, min_replicas, max_replicas, target_inflight_per_replica, idle_timeout_s, created_by)
         values (?, ?, ?, ?, ?, 'created', ?, ?, ?, ?, ?::jsonb, ?::jsonb, ?::jsonb, ?, ?, ?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?, ?)`,
        [id, teamId, b.service_slug, b.display_name, b.service_type, b.service_desc, b.docker_image ?? '', b.exposed_port ?? 0, b.health_path, json(b.env_config), json(b.volume_config), json(b.required_labels), b.gpu_count, b.replica_count, b.usage_prompt, b.openapi_url, b.external_url ?? '', b.external_auth_credential_id ?? null, b.session_affinity ? json(b.session_affinity) : null, b.min_replicas, b.max_replicas, b.target_inflight_per_replica, b.idle_timeout_s, createdBy],
        );
        await record({ targetId: id, details: { service_slug: b.service_slug } });
      });
    } catch (e) {
      if (isUniqueViolation(e)) throw slugTaken(b.service_slug);
      throw e;
    }
    return id;
  }

  async update(teamId: string, id: string, b: UpdateServiceBody, audit?: AuditNote): Promise<ServiceRecord | null> {
    const sets: string[] = [];
    const params: unknown[] = [];
    for (const [k, v] of Object.entries(b)) {
      if (v === undefined) continue;
      const [col, cast] = COLUMNS[k as keyof UpdateServiceBody];
      sets.push(`${col} = ?${cast ? `::${cast}` : ''}`);
      params.push(cast === 'jsonb' ? json(v) : v);
    }
    try {
      return await audited(this.db, audit, async (tq, record) => {
        const rows = await tq<ServiceRow>(`update container_services set ${sets.join(', ')}, updated_at = now() where team_id = ? and id = ? returning *`, [...params, teamId, id]);
        if (!rows[0]) return null;
        await record({ details: { changed: Object.keys(b).filter((k) => (b as Record<string, unknown>)[k] !== undefined) } });
        return rowToService(rows[0]);
      });
    } catch (e) {
      if (isUniqueViolation(e)) throw slugTaken(String(b.service_slug));
      throw e;
    }
  }

  async get(teamId: string, id: string): Promise<ServiceRecord | null> {
    const rows = await this.q<ServiceRow>('select * from container_services where team_id = ? and id = ?', [teamId, id]);
    return rows[0] ? rowToService(rows[0]) : null;
  }

  async byId(id: string): Promise<ServiceRecord | null> {
    const rows = await this.q<ServiceRow>('select * from container_services where id = ?', [id]);
    return rows[0] ? rowToService(rows[0]) : null;
  }

  async bySlug(teamId: string, slug: string): Promise<ServiceRecord | null> {
    const rows = await this.q<ServiceRow>('select * from container_services where team_id = ? and service_slug = ?', [teamId, slug]);
    return rows[0] ? rowToService(rows[0]) : null;
  }

  async list(teamId: string, limit: number, offset: number): Promise<{ rows: ServiceRecord[]; total: number }> {
    const rows = await this.q<ServiceRow>('select * from container_services where team_id = ? order by created_at, id limit ? offset ?', [teamId, limit, offset]);
    const c = await this.q<{ n: number }>('select count(*)::int as n from container_services where team_id = ?', [teamId]);
    return { rows: rows.map(rowToService), total: Number(c[0]?.n ?? 0) };
  }

  async delete(id: string, audit?: AuditNote): Promise<void> {
    if (!audit) {
      await this.q('delete from container_services where id = ?', [id]);
      return;
    }
    await audited(this.db, audit, async (tq, record) => {
      await tq('delete from container_services where id = ?', [id]);
      await record();
    });
  }

  /** The actor's write of the service's state (with the audit note of the operation that caused it). */
  async setStatus(id: string, status: ServiceStatus, detail: ServiceRecord['detail'], audit?: AuditNote): Promise<void> {
    if (!audit) {
      await this.q('update container_services set service_status = ?, status_detail = ?::jsonb, updated_at = now() where id = ?', [status, json(detail), id]);
      return;
    }
    await audited(this.db, audit, async (tq, record) => {
      await tq('update container_services set service_status = ?, status_detail = ?::jsonb, updated_at = now() where id = ?', [status, json(detail), id]);
      await record({ details: { service_status: status } });
    });
  }

  async audit(note: AuditNote): Promise<void> {
    await appendAudit(this.q, note);
  }

  async instances(serviceId: string): Promise<ServiceInstance[]> {
    const rows = await this.q<InstanceRow>('select * from container_instances where service_id = ? order by created_at, id', [serviceId]);
    return rows.map(rowToInstance);
  }

  /** Instances of every service of a team (the gateway's routing table). */
  async teamInstances(teamId: string): Promise<Array<ServiceInstance & { serviceId: string }>> {
    const rows = await this.q<InstanceRow>('select * from container_instances where team_id = ?', [teamId]);
    return rows.map((r) => ({ ...rowToInstance(r), serviceId: r.service_id }));
  }

  async serviceIdsOnAgent(agentId: string): Promise<string[]> {
    const rows = await this.q<{ service_id: string }>('select distinct service_id from container_instances where agent_id = ?', [agentId]);
    return rows.map((r) => r.service_id);
  }

  async serviceOfInstance(instanceId: string): Promise<string | null> {
    const rows = await this.q<{ service_id: string }>('select service_id from container_instances where id = ?', [instanceId]);
    return rows[0]?.service_id ?? null;
  }

  async putInstance(i: { id: string; serviceId: string; teamId: string; agentId: string; status: InstanceState; healthy: boolean; error: string; revision?: string }): Promise<void> {
    await this.q(
      `insert into container_instances (id, service_id, team_id, agent_id, instance_status, healthy, instance_error, spec_revision) values (?, ?, ?, ?, ?, ?, ?, ?)
       on conflict (id) do update set instance_status = excluded.instance_status, healthy = excluded.healthy, instance_error = excluded.instance_error, spec_revision = excluded.spec_revision, updated_at = now()`,
      [i.id, i.serviceId, i.teamId, i.agentId, i.status, i.healthy, i.error, i.revision ?? ''],
    );
  }

  /** A rollback: the service's spec goes back to the one its old replicas run. */
  async restoreSpec(id: string, spec: ServiceSpec): Promise<void> {
    await this.q('update container_services set docker_image = ?, exposed_port = ?, health_path = ?, env_config = ?::jsonb, gpu_count = ?, updated_at = now() where id = ?', [spec.image, spec.exposedPort, spec.healthPath, json(spec.env), spec.gpuCount, id]);
  }

  async deleteInstance(id: string): Promise<void> {
    await this.q('delete from container_instances where id = ?', [id]);
  }

  /** The team's agents that are online (or busy) and offer a container runtime. */
  async placementAgents(teamId: string): Promise<PlacementAgent[]> {
    const rows = await this.q<{ id: string; labels: unknown; gpu_count: number; container_runtime: string; agent_status: string }>(
      `select id, labels, gpu_count, container_runtime, agent_status from agents where team_id = ? and agent_status in ('online', 'busy') and container_runtime <> '' order by id`,
      [teamId],
    );
    return rows.map((r) => ({ id: r.id, labels: jsonStrings(r.labels), gpuCount: r.gpu_count, runtime: r.container_runtime, status: r.agent_status }));
  }

  async gpuUsage(teamId: string, exceptServiceId: string): Promise<Map<string, number>> {
    const rows = await this.q<{ agent_id: string; gpu_count: number; agent_gpus: number }>(
      `select i.agent_id, s.gpu_count, a.gpu_count as agent_gpus from container_instances i join container_services s on s.id = i.service_id join agents a on a.id = i.agent_id
       where i.team_id = ? and i.service_id <> ? and i.instance_status in ('pending', 'starting', 'running') and s.gpu_count <> 0`,
      [teamId, exceptServiceId],
    );
    const out = new Map<string, number>();
    for (const r of rows) out.set(r.agent_id, (out.get(r.agent_id) ?? 0) + (r.gpu_count < 0 ? Math.max(1, r.agent_gpus) : r.gpu_count));
    return out;
  }

  /** Services that should run or are stopping (reconciled on start and after a cluster view change). */
  async activeServiceIds(): Promise<string[]> {
    const rows = await this.q<{ id: string }>(`select id from container_services where service_status in ('deploying', 'running', 'stopping') and service_type = 'deployed'`);
    return rows.map((r) => r.id);
  }

  async setAgentRuntime(agentId: string, runtime: string, tunnel: boolean): Promise<void> {
    await this.q('update agents set container_runtime = ?, tunnel = ? where id = ?', [runtime, tunnel, agentId]);
  }
}
