import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Config } from '../shared/config.js';
import { outboundCa } from '../events/outbound.js';
import type { RedisSentinelTarget } from '../cluster/redis.js';

/**
 * The settings more than one module needs, each read from the configuration once. A value only
 * one module needs is read by that module.
 */
export interface NodeSettings {
  /** This program's version (package.json): traces, MCP's server info. */
  version: string;
  /** GANTRY_DATA_DIR, absolute. */
  dataDir: string;
  /** REDIS_URL set: cluster mode. */
  redisUrl: string | undefined;
  /** REDIS_SENTINELS + REDIS_SENTINEL_MASTER set: cluster mode on a Redis behind Sentinel. */
  redisSentinel: RedisSentinelTarget | undefined;
  /** Team schedulers' rebuild from PostgreSQL: needed where messages can be lost (cluster mode). */
  schedulerResyncMs: number;
  /** GANTRY_AGENT_GRACE_S in ms (agent actors, task recovery). */
  agentGraceMs: number;
  /** GANTRY_OUTPUT_RETENTION_S (files, the run endpoint). */
  outputRetentionS: number;
  /** GANTRY_OUTBOUND_CA_FILE (the live events read it themselves). */
  outboundCaFile: string | undefined;
  /** The root certificates plus GANTRY_OUTBOUND_CA_FILE for outbound calls (cloud providers, external services). */
  outboundCa: string[] | undefined;
  /** GANTRY_OUTBOUND_ALLOWLIST (the event and cloud outbound guards). */
  outboundAllowlist: Config['GANTRY_OUTBOUND_ALLOWLIST'];
  /** GANTRY_CLUSTER_LEASE_MS (membership, leases). */
  clusterLeaseMs: number;
  /** GANTRY_NODE_ID (the cluster member, the agents rows' node_id on a single node). */
  nodeId: string | undefined;
  /** S3_ENDPOINT (the object store, the console's allowed origins). */
  s3Endpoint: string | undefined;
  /** GANTRY_MAX_BODY_BYTES (the edge, MCP). */
  maxBodyBytes: number;
  /** GANTRY_CLUSTER_HOST/PORT: the remoting port (the cluster, its start failure). */
  cluster: { host: string; port: number };
  grpc: { host: string; port: number };
  http: { host: string; port: number };
}

export function nodeSettings(config: Config): NodeSettings {
  const redisUrl = config.REDIS_URL;
  const redisSentinel: RedisSentinelTarget | undefined =
    config.REDIS_SENTINELS && config.REDIS_SENTINEL_MASTER
      ? {
          master: config.REDIS_SENTINEL_MASTER,
          sentinels: config.REDIS_SENTINELS.split(',').map((hp) => {
            const i = hp.lastIndexOf(':');
            return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)) };
          }),
        }
      : undefined;
  const outboundCaFile = config.GANTRY_OUTBOUND_CA_FILE;
  return {
    version: packageVersion(),
    dataDir: resolve(config.GANTRY_DATA_DIR),
    redisUrl,
    redisSentinel,
    schedulerResyncMs: config.GANTRY_SCHEDULER_RESYNC_MS || (redisUrl || redisSentinel ? 5_000 : 0),
    agentGraceMs: config.GANTRY_AGENT_GRACE_S * 1000,
    outputRetentionS: config.GANTRY_OUTPUT_RETENTION_S,
    outboundCaFile,
    outboundCa: outboundCa(outboundCaFile),
    outboundAllowlist: config.GANTRY_OUTBOUND_ALLOWLIST,
    clusterLeaseMs: config.GANTRY_CLUSTER_LEASE_MS,
    nodeId: config.GANTRY_NODE_ID,
    s3Endpoint: config.S3_ENDPOINT,
    maxBodyBytes: config.GANTRY_MAX_BODY_BYTES,
    cluster: { host: config.GANTRY_CLUSTER_HOST, port: config.GANTRY_CLUSTER_PORT },
    grpc: { host: config.GANTRY_GRPC_HOST, port: config.GANTRY_GRPC_PORT },
    http: { host: config.GANTRY_HTTP_HOST, port: config.GANTRY_HTTP_PORT },
  };
}

/**
 * The origin clients and agents use: GANTRY_PUBLIC_URL, else this node's loopback address, whose
 * port is known once the HTTP edge listens (GANTRY_HTTP_PORT=0 picks one). Until then it is the
 * configured port's. A value that becomes known at listen, not a dependency set late.
 */
export class PublicUrl {
  private url: string;

  constructor(
    private readonly configured: string | undefined,
    configuredPort: number,
  ) {
    this.url = configured ?? `http://127.0.0.1:${configuredPort}`;
  }

  /** The HTTP edge listens on this port. */
  bound(port: number): void {
    this.url = this.configured ?? `http://127.0.0.1:${port}`;
  }

  /** As configured (GantryNode.publicUrl, the local object store's base URL). */
  raw(): string {
    return this.url;
  }

  /** Without trailing slashes (redirect URIs, links). */
  origin(): string {
    return this.url.replace(/\/+$/, '');
  }
}

function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string }).version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}
