import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { z } from 'zod';

/**
 * The whole environment of a node, parsed once by one zod schema. A bad value stops start-up with
 * one line naming the variable (see loadConfig). README.md carries the same table.
 */
const bool = (def: boolean) =>
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no'])
    .default(def ? 'true' : 'false')
    .transform((v) => v === 'true' || v === '1' || v === 'yes');
const int = (def: number, min: number, max: number) => z.coerce.number().int().min(min).max(max).default(def);
const optStr = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

export const configSchema = z.object({
  GANTRY_HTTP_HOST: z.string().default('0.0.0.0'),
  GANTRY_HTTP_PORT: int(8080, 0, 65535),
  GANTRY_GRPC_HOST: z.string().default('0.0.0.0'),
  GANTRY_GRPC_PORT: int(50051, 0, 65535),
  GANTRY_DATA_DIR: z.string().min(1).default('./data'),
  DATABASE_URL: optStr.pipe(z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL').optional()),
  GANTRY_DB_POOL_MAX: int(20, 1, 200),
  /** The longest wait for a pool connection (opening one included) before 503 database_unavailable (0 = knex's 60 s). */
  GANTRY_DB_ACQUIRE_TIMEOUT_MS: int(5000, 0, 600_000),
  /** PostgreSQL statement_timeout, and the bound on a statement without any answer (+500 ms); then 503 database_unavailable (0 = none). */
  GANTRY_DB_STATEMENT_TIMEOUT_MS: int(5000, 0, 3_600_000),
  /** Create the database named by DATABASE_URL when it does not exist (otherwise start-up refuses, so a typo never splits data). */
  GANTRY_DB_CREATE: bool(false),
  REDIS_URL: optStr.pipe(z.string().regex(/^rediss?:\/\//, 'must be a redis:// or rediss:// URL').optional()),
  /** Redis behind Sentinel (instead of REDIS_URL): the sentinels (host:port,host:port,...) and the master's name. */
  REDIS_SENTINELS: optStr.pipe(z.string().regex(/^[^\s,:]+:\d{1,5}(,[^\s,:]+:\d{1,5})*$/, 'must be host:port[,host:port...]').optional()),
  REDIS_SENTINEL_MASTER: optStr,
  GANTRY_REDIS_PREFIX: z.string().default('gantry:'),
  GANTRY_STORAGE: optStr.pipe(z.string().regex(/^(local|s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](\/.*)?)$/, 'must be "local" or s3://bucket[/prefix]').optional()),
  S3_ENDPOINT: optStr,
  S3_REGION: z.string().default('us-east-1'),
  S3_ACCESS_KEY_ID: optStr,
  S3_SECRET_ACCESS_KEY: optStr,
  GANTRY_PUBLIC_URL: optStr.pipe(z.url({ protocol: /^https?$/ }).optional()),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  GANTRY_MAX_BODY_BYTES: int(1024 * 1024, 1024, 64 * 1024 * 1024),
  // the contract's single-part default: 500 MB (decimal), not MiB
  GANTRY_MAX_UPLOAD_BYTES: int(500_000_000, 1, 5 * 1024 * 1024 * 1024),
  GANTRY_SHUTDOWN_TIMEOUT_MS: int(10_000, 0, 120_000),
  /** Container gateway: until a container's response head (502 upstream_timeout after). */
  GANTRY_PROXY_TIMEOUT_MS: int(60_000, 100, 3_600_000),
  /** Container gateway: concurrent requests per instance on one node (503 instances_busy beyond). */
  GANTRY_PROXY_MAX_INFLIGHT: int(256, 1, 100_000),
  /** Container gateway: request body cap of the proxy (invoke: its base64 JSON, 1.4x). */
  GANTRY_PROXY_MAX_BODY_BYTES: int(1024 * 1024 * 1024, 1024, 5 * 1024 * 1024 * 1024),
  /** Container gateway: the largest container response invoke returns (base64 in JSON). */
  GANTRY_INVOKE_MAX_RESPONSE_BYTES: int(32 * 1024 * 1024, 1024, 256 * 1024 * 1024),
  /** Container autoscaling: how often each gateway node reports its load to a service's actor (and the actor decides). */
  GANTRY_AUTOSCALE_INTERVAL_MS: int(1_000, 20, 60_000),
  /** Container autoscaling: load must stay lower this long before replicas are drained (scale-down cool-down). */
  GANTRY_AUTOSCALE_COOLDOWN_MS: int(60_000, 100, 3_600_000),
  /** Container autoscaling: requests that waited this long in the gateway's queue add a replica. */
  GANTRY_AUTOSCALE_QUEUE_DELAY_MS: int(500, 1, 600_000),
  /** Container autoscaling: how long the gateway holds a request while a replica starts (scale from zero, every replica busy); then 503. */
  GANTRY_AUTOSCALE_HOLD_TIMEOUT_MS: int(120_000, 100, 3_600_000),
  /** Container rolling updates: a new replica not healthy this long after its placement rolls the update back. */
  GANTRY_ROLLOUT_HEALTH_TIMEOUT_MS: int(300_000, 100, 86_400_000),
  /** Credential vault keys: "kid:base64-32-bytes,..." (first encrypts; all decrypt). Unset: derived from the deployment secret. */
  GANTRY_VAULT_KEYS: optStr,
  // hosted cloud providers (dispatch_target comfy_cloud): default concurrency per team key, job status poll interval, request timeout
  GANTRY_CLOUD_MAX_CONCURRENT_JOBS: int(1, 1, 256),
  GANTRY_CLOUD_POLL_MS: int(2_000, 50, 60_000),
  GANTRY_CLOUD_TIMEOUT_MS: int(30_000, 100, 600_000),
  // a busy or unavailable provider holds new submissions this long (times the failures in a row, up to 6)
  GANTRY_CLOUD_BUSY_RETRY_MS: int(5_000, 10, 600_000),
  GANTRY_TASK_TIMEOUT_MAX_S: int(86_400, 1, 30 * 86_400),
  GANTRY_AGENT_GRACE_S: int(30, 1, 3600),
  /** A queued task not acknowledged by its agent within this goes back to waiting (dispatch is at-least-once). */
  GANTRY_ACK_TIMEOUT_S: int(60, 1, 3600),
  /**
   * Task retry backoff: a retry created by a failure of attempt n is not scheduled before
   * failed_at + random(0, min(BASE * 2^(n-1), MAX)) seconds (full jitter). BASE 0 retries at once.
   */
  GANTRY_RETRY_BACKOFF_BASE_S: int(1, 0, 3600),
  GANTRY_RETRY_BACKOFF_MAX_S: int(60, 0, 86_400),
  GANTRY_HEARTBEAT_INTERVAL_S: int(10, 1, 300),
  GANTRY_INPUT_RETENTION_S: int(86_400, 60, 365 * 86_400),
  GANTRY_OUTPUT_RETENTION_S: int(7 * 86_400, 60, 365 * 86_400),
  GANTRY_REGISTRATION_ENABLED: bool(true),
  GANTRY_EMAIL_VERIFICATION_REQUIRED: bool(false),
  GANTRY_OAUTH_PROVIDERS: optStr,
  GANTRY_MCP_ENABLED: bool(true),
  /** Traces: off (default) or otlp (OpenTelemetry, exported over OTLP as the standard OTEL_* variables say). */
  GANTRY_TRACING: z.enum(['off', 'otlp']).default('off'),
  /** /metrics: how long the figures counted in PostgreSQL (tasks by state, queues, agents, webhook backlog) are reused between scrapes. */
  GANTRY_METRICS_CACHE_MS: int(2_000, 0, 60_000),
  GANTRY_CONSOLE_ENABLED: bool(true),
  GANTRY_AUTO_TEAM: bool(true),
  GANTRY_MANUAL_TEAM_CREATION: bool(true),
  GANTRY_MAX_USERS: int(0, 0, 10_000_000),
  GANTRY_MAX_TEAMS: int(0, 0, 10_000_000),
  GANTRY_MAX_OWNED_TEAMS: int(0, 0, 100_000),
  GANTRY_MAX_AGENTS: int(0, 0, 1_000_000),
  GANTRY_MAX_CONCURRENT_TASKS: int(0, 0, 1_000_000),
  /** The team scheduler's policy: fair (priority, aging, fair share, warm placement) or fifo-lru (FIFO, least recently used agent). */
  GANTRY_SCHEDULER_STRATEGY: z.enum(['fair', 'fifo-lru']).default('fair'),
  /** fair: a waiting task rises one priority level per this many seconds (0 = no aging). */
  GANTRY_PRIORITY_AGING_S: int(300, 0, 30 * 86_400),
  /** fair: the sliding window of GPU-seconds that fair share compares submitters over. */
  GANTRY_FAIRSHARE_WINDOW_S: int(3600, 1, 30 * 86_400),
  /** fair: how many places a task may overtake its submitter's oldest one to run on a warm agent (0 = strict FIFO per submitter). */
  GANTRY_SCHEDULER_WARM_LOOKAHEAD: int(1000, 0, 100_000),
  /** fair: a submitter up to this many tasks' worth of GPU-seconds ahead of the least served one may take a slot its warm task fits (0 = strict fair share order). */
  GANTRY_SCHEDULER_WARM_SLACK_TASKS: int(20, 0, 10_000),
  /** fair: seconds a newly submitted task may wait for a busy agent warm for it instead of a cold start on a free one (0 = never). */
  GANTRY_SCHEDULER_WARM_WAIT_S: int(15, 0, 3600),
  GANTRY_JWT_PRIVATE_KEY: optStr,
  /**
   * The deployment's secret (>= 32 characters): encrypts the token signing keys kept in PostgreSQL.
   * Every node of a cluster needs the same one. Unset on a single node: generated once in the data dir.
   */
  GANTRY_SECRET_KEY: optStr.pipe(z.string().min(32, 'must be at least 32 characters').optional()),
  /** Signing keys kept in PostgreSQL are rotated after this many days (0 = never); the previous key stays valid for verification. */
  GANTRY_JWT_ROTATE_DAYS: int(30, 0, 3650),
  GANTRY_JWT_ISSUER: z.string().default('gantry'),
  GANTRY_JWT_AUDIENCE: z.string().default('gantry-api'),
  GANTRY_ACCESS_TOKEN_TTL_S: int(900, 5, 86_400),
  GANTRY_REFRESH_TOKEN_TTL_S: int(30 * 86_400, 3600, 365 * 86_400),
  /** Requests per minute per client IP on each of login, register, password forgot and pairing start/confirm. */
  GANTRY_AUTH_RATE_LIMIT_PER_MIN: int(30, 1, 1_000_000),
  /**
   * Failed credential checks (a well-formed sk-/dk-/ak- value that names no credential) per minute
   * per client IP and per credential prefix before such values get 429 without a lookup (0 = off).
   * Cluster-wide over Redis (src/identity/failure-limit.ts).
   */
  GANTRY_AUTH_FAILURE_LIMIT_PER_MIN: int(60, 0, 1_000_000),
  GANTRY_AUTH_FAILURE_PREFIX_LIMIT_PER_MIN: int(20, 0, 1_000_000),
  /**
   * Requests per minute (0 = off, the default) on the runtime surface (/api/v1/r/...) and the
   * management surface (every other authenticated route), per credential (sk-/dk-/ak- id, or JWT
   * user + team) and per team. Per node, in memory (src/edge/rate-limits.ts).
   */
  GANTRY_RATE_LIMIT_RUNTIME_PER_MIN: int(0, 0, 100_000_000),
  GANTRY_RATE_LIMIT_RUNTIME_TEAM_PER_MIN: int(0, 0, 100_000_000),
  GANTRY_RATE_LIMIT_MANAGEMENT_PER_MIN: int(0, 0, 100_000_000),
  GANTRY_RATE_LIMIT_MANAGEMENT_TEAM_PER_MIN: int(0, 0, 100_000_000),
  /** Minimum seconds between two polls of one device pairing (faster polls get 429 slow_down). */
  GANTRY_PAIRING_POLL_INTERVAL_S: int(5, 0, 60),
  SMTP_URL: optStr,
  GANTRY_MAIL_FROM: z.string().default('Gantry <gantry@localhost>'),
  GANTRY_OUTBOUND_ALLOWLIST: optStr,
  GANTRY_SSE_MAX_STREAMS_PER_TEAM: int(1000, 1, 1_000_000),
  /** Extra CA bundle (PEM file) trusted for outbound HTTPS (webhooks), on top of the system roots and NODE_EXTRA_CA_CERTS. */
  GANTRY_OUTBOUND_CA_FILE: optStr,
  /** Interval of the `: keep-alive` comment on SSE streams. */
  GANTRY_SSE_KEEPALIVE_MS: int(15_000, 50, 600_000),
  GANTRY_GRPC_TLS_CERT: optStr,
  GANTRY_GRPC_TLS_KEY: optStr,
  GANTRY_NODE_ID: optStr,
  /** Cluster mode (REDIS_URL set): node-to-node gRPC (remoting) bind address and port (0 = a free port). */
  GANTRY_CLUSTER_HOST: z.string().default('0.0.0.0'),
  GANTRY_CLUSTER_PORT: int(50061, 0, 65535),
  /** host:port the other nodes dial this node on (default: this host's name and the bound cluster port). */
  GANTRY_CLUSTER_ADVERTISE: optStr.pipe(z.string().regex(/^[^\s/]+:\d{1,5}$/, 'must be HOST:PORT').optional()),
  /** Membership lease: a node silent this long is suspect, twice as long dead (its actors move). */
  GANTRY_CLUSTER_LEASE_MS: int(10_000, 300, 600_000),
  /** Team schedulers rebuild their view from PostgreSQL after this long without activity while tasks wait, and every 2x this each node asks it of the schedulers it owns. 0 = 5000 in cluster mode, off on a single node. */
  GANTRY_SCHEDULER_RESYNC_MS: int(0, 0, 600_000),
  /** Audit log entries older than this many days are deleted (hourly); 0 keeps them forever. */
  GANTRY_AUDIT_RETENTION_DAYS: int(365, 0, 36_500),
  /** Test/diagnostic routes under /api/v1/_debug (never enable in production). */
  GANTRY_DEBUG_ROUTES: bool(false),
});

export type RawConfig = z.infer<typeof configSchema>;

const ROLE = z.enum(['admin', 'member']);

/**
 * One OpenID Connect provider of GANTRY_OAUTH_PROVIDERS (a JSON array of these; docs in README.md
 * "Single sign-on"). Discovery, PKCE, state and nonce are always on.
 */
export const OidcProviderSchema = z.strictObject({
  /** URL-safe id used in /auth/oidc/{id}/start and listed by /server-info. */
  id: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/, 'id must be 1-63 lowercase letters, digits, - or _'),
  display_name: z.string().trim().min(1).max(100).optional(),
  /** The issuer identifier: its /.well-known/openid-configuration is fetched (https, unless allow_insecure_http). */
  issuer: z.url({ protocol: /^https?$/ }),
  client_id: z.string().min(1).max(512),
  client_secret: z.string().min(1).max(4096).optional(),
  scopes: z.array(z.string().regex(/^[\x21\x23-\x5b\x5d-\x7e]+$/)).max(32).default(['openid', 'email', 'profile']),
  /** First login with an email that already has an account: link to it when the provider says the email is verified. Off: 409. */
  link_verified_email: z.boolean().default(false),
  /** First login without an account creates one (false: only existing, linked users may sign in). */
  create_users: z.boolean().default(true),
  /** Group claim -> team role: {claim: "groups", map: {"<group>": {team: "<team uuid>", role: "admin"|"member"}}}. */
  group_mapping: z
    .strictObject({
      claim: z.string().min(1).max(200).default('groups'),
      map: z.record(z.string().min(1).max(500), z.union([z.strictObject({ team: z.uuid(), role: ROLE }), z.array(z.strictObject({ team: z.uuid(), role: ROLE })).max(100)])),
    })
    .optional(),
  /** Plain-http issuer (a loopback test provider); never for a real deployment. */
  allow_insecure_http: z.boolean().default(false),
});
export type OidcProviderConfig = z.infer<typeof OidcProviderSchema>;

/** GANTRY_OAUTH_PROVIDERS: a JSON array of providers (ids unique). A message naming the first problem, or the list. */
export function parseOidcProviders(raw: string | undefined): OidcProviderConfig[] | string {
  if (!raw) return [];
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    return 'must be a JSON array of OpenID Connect providers ([{"id", "issuer", "client_id", "client_secret", ...}])';
  }
  const r = z.array(OidcProviderSchema).max(50).safeParse(json);
  if (!r.success) {
    const i = r.error.issues[0];
    return `${i?.path.join('.') || 'value'}: ${i?.message ?? 'invalid'}`;
  }
  const ids = new Set<string>();
  for (const p of r.data) {
    if (ids.has(p.id)) return `provider id ${p.id} appears twice`;
    ids.add(p.id);
    if (new URL(p.issuer).protocol === 'http:' && !p.allow_insecure_http) return `${p.id}: issuer must be https:// (allow_insecure_http is for loopback test providers)`;
  }
  return r.data;
}

export interface Config extends RawConfig {
  /** Base URL the node advertises in links (presigned URLs, emails); derived from the port when unset. */
  publicUrl: string;
  /** 0 means "unlimited" for every quota. */
  quotas: { maxUsers: number; maxTeams: number; maxOwnedTeams: number; maxAgents: number; maxConcurrentTasks: number };
  oauthProviders: Array<{ id: string; display_name: string }>;
  /** The OpenID Connect providers (GANTRY_OAUTH_PROVIDERS) in full: src/identity/oidc.ts. */
  oidcProviders: OidcProviderConfig[];
}

/**
 * A refusal to start: bad configuration, or a start-up check that failed before anything was
 * touched (busy port, data dir in use, missing database). The CLI prints its message as one line
 * on stderr and exits 78 (EX_CONFIG).
 */
export class ConfigError extends Error {}

/** Both halves of the gRPC TLS pair set together, both files readable, and the key matching the certificate. */
function checkGrpcTls(cert: string | undefined, key: string | undefined): void {
  if (cert === undefined && key === undefined) return;
  if (cert === undefined || key === undefined) {
    const missing = cert === undefined ? 'GANTRY_GRPC_TLS_CERT' : 'GANTRY_GRPC_TLS_KEY';
    const set = cert === undefined ? 'GANTRY_GRPC_TLS_KEY' : 'GANTRY_GRPC_TLS_CERT';
    throw new ConfigError(`invalid configuration: ${set} is set but ${missing} is not (set both, or neither for plaintext gRPC)`);
  }
  const read = (name: string, path: string): Buffer => {
    try {
      return readFileSync(path);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? 'unreadable';
      throw new ConfigError(`invalid configuration: ${name}=${JSON.stringify(path)}: cannot read the file (${code})`);
    }
  };
  const certPem = read('GANTRY_GRPC_TLS_CERT', cert);
  const keyPem = read('GANTRY_GRPC_TLS_KEY', key);
  try {
    createSecureContext({ cert: certPem, key: keyPem });
  } catch (e) {
    const reason = String((e as Error).message ?? e).split('\n')[0];
    throw new ConfigError(`invalid configuration: GANTRY_GRPC_TLS_CERT/GANTRY_GRPC_TLS_KEY: not a usable PEM certificate and matching key (${reason})`);
  }
}

export function loadConfig(env: Record<string, string | undefined> = process.env, overrides: Partial<RawConfig> = {}): Config {
  const picked: Record<string, string | undefined> = {};
  for (const k of Object.keys(configSchema.shape)) picked[k] = env[k];
  const parsed = configSchema.safeParse(picked);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = String(issue?.path[0] ?? 'environment');
    throw new ConfigError(`invalid configuration: ${name}=${JSON.stringify(env[name] ?? '')}: ${issue?.message ?? 'invalid'}`);
  }
  const raw = { ...parsed.data, ...overrides };
  checkGrpcTls(raw.GANTRY_GRPC_TLS_CERT, raw.GANTRY_GRPC_TLS_KEY);
  // a cluster's nodes share token signing keys through PostgreSQL, encrypted with the deployment's secret
  if (raw.REDIS_SENTINELS && raw.REDIS_URL) throw new ConfigError('invalid configuration: set REDIS_URL or REDIS_SENTINELS (with REDIS_SENTINEL_MASTER), not both');
  if (!raw.REDIS_SENTINELS !== !raw.REDIS_SENTINEL_MASTER) throw new ConfigError('invalid configuration: REDIS_SENTINELS and REDIS_SENTINEL_MASTER go together (the sentinels, and the name of the master they monitor)');
  if ((raw.REDIS_URL || raw.REDIS_SENTINELS) && !raw.GANTRY_SECRET_KEY && !raw.GANTRY_JWT_PRIVATE_KEY)
    throw new ConfigError('invalid configuration: GANTRY_SECRET_KEY is required in cluster mode (REDIS_URL or REDIS_SENTINELS set): the same secret on every node (it encrypts the shared token signing keys)');
  const oidcProviders = parseOidcProviders(raw.GANTRY_OAUTH_PROVIDERS);
  if (typeof oidcProviders === 'string') throw new ConfigError(`invalid configuration: GANTRY_OAUTH_PROVIDERS: ${oidcProviders}`);
  const oauthProviders = oidcProviders.map((p) => ({ id: p.id, display_name: p.display_name ?? p.id }));
  return {
    ...raw,
    publicUrl: (raw.GANTRY_PUBLIC_URL ?? `http://127.0.0.1:${raw.GANTRY_HTTP_PORT}`).replace(/\/+$/, ''),
    quotas: {
      maxUsers: raw.GANTRY_MAX_USERS,
      maxTeams: raw.GANTRY_MAX_TEAMS,
      maxOwnedTeams: raw.GANTRY_MAX_OWNED_TEAMS,
      maxAgents: raw.GANTRY_MAX_AGENTS,
      maxConcurrentTasks: raw.GANTRY_MAX_CONCURRENT_TASKS,
    },
    oauthProviders,
    oidcProviders,
  };
}
