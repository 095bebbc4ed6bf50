/**
 * Object store factory. GANTRY_STORAGE: unset / '' / 'local' -> LocalObjectStore under
 * `<dataDir>/storage`; 's3://bucket[/prefix]' -> S3ObjectStore (S3_ENDPOINT, S3_REGION, keys).
 */
import { join } from 'node:path';
import { LocalObjectStore } from './local.js';
import { S3ObjectStore } from './s3.js';
import type { ObjectStore } from './port.js';

export type { ObjectInfo, ObjectStore, PresignedRequest } from './port.js';
export { LocalObjectStore } from './local.js';
export { S3ObjectStore } from './s3.js';
export { handleLocalStorageRequest, createBodyChannel } from './local-http.js';
export type { LocalStorageRequest, LocalStorageResponse } from './local-http.js';

export interface ObjectStoreConfig {
  /** GANTRY_STORAGE. */
  storage?: string;
  dataDir: string;
  /** Origin of the edge, for local-store URLs, e.g. http://127.0.0.1:8080. */
  publicBaseUrl: string;
  /** HMAC key for local-store URL signatures. */
  secret: Buffer;
  s3: { endpoint?: string; region?: string; accessKeyId?: string; secretAccessKey?: string };
  clock?: { now(): number };
}

/** Parses 's3://bucket[/prefix]'; throws on anything else. */
export function parseS3Url(s: string): { bucket: string; prefix?: string } {
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/.exec(s);
  if (!m || !m[1]) throw new Error(`GANTRY_STORAGE: expected s3://bucket[/prefix], got ${JSON.stringify(s)}`);
  const prefix = (m[2] ?? '').replace(/^\/+|\/+$/g, '');
  return prefix === '' ? { bucket: m[1] } : { bucket: m[1], prefix };
}

export function createObjectStore(cfg: ObjectStoreConfig): ObjectStore {
  const s = (cfg.storage ?? '').trim();
  if (s === '' || s === 'local') {
    return new LocalObjectStore({
      rootDir: join(cfg.dataDir, 'storage'),
      publicBaseUrl: cfg.publicBaseUrl,
      secret: cfg.secret,
      ...(cfg.clock ? { clock: cfg.clock } : {}),
    });
  }
  if (s.startsWith('s3://')) {
    const { bucket, prefix } = parseS3Url(s);
    return new S3ObjectStore({
      bucket,
      region: cfg.s3.region || 'us-east-1',
      forcePathStyle: true,
      ...(cfg.s3.endpoint ? { endpoint: cfg.s3.endpoint } : {}),
      ...(cfg.s3.accessKeyId ? { accessKeyId: cfg.s3.accessKeyId } : {}),
      ...(cfg.s3.secretAccessKey ? { secretAccessKey: cfg.s3.secretAccessKey } : {}),
      ...(prefix ? { prefix } : {}),
    });
  }
  throw new Error(`GANTRY_STORAGE: expected unset, 'local' or s3://bucket[/prefix], got ${JSON.stringify(s)}`);
}
