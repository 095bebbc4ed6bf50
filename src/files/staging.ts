/**
 * Staged uploads: POST /r/files/presign (inputs), /models/presign and /nodes/presign all land here.
 * A presign records the key in staged_files (team, purpose, file name, size, content type,
 * expires_at = now + GANTRY_INPUT_RETENTION_S) and returns a presigned single-part PUT (or, with
 * upload_mode "multipart", just the key for /uploads/multipart/*).
 *
 * - Inputs: the key is the run-time file_key. lookup() (the FileLookup of the run endpoint)
 *   returns a StagedFile only for the caller's team's input keys whose object was uploaded.
 * - Model files and node packages: POST /models and POST /nodes consume the staged row (the
 *   registry owns the object from then on).
 * - The sweeper removes expired rows and their objects (inputs still referenced by an open task
 *   are kept until that task ends).
 */
import { z } from 'zod';
import type { ObjectStore } from '../storage/port.js';
import { MAX_PARTS, MAX_PART_BYTES } from '../storage/port.js';
import type { StagedFile } from '../domain/workflows/parameters.js';
import { AppError, badRequest, fromZodIssues, invalidParameter } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { isTeamKey, stagedKey, type StagePurpose } from './keys.js';
import type { FilesStore, StagedRow } from './store.js';

/** S3's largest object; the ceiling of a multipart upload. */
export const MAX_MULTIPART_BYTES = 5 * 1024 ** 4;

const printable = /^[\x20-\x7e]+$/;

export const presignBodySchema = z.strictObject({
  file_name: z.string().min(1, 'must not be empty').max(255, 'must be at most 255 characters'),
  file_size: z.number().int('must be an integer').min(1, 'must be at least 1 byte'),
  content_type: z.string().min(1, 'must not be empty').max(255, 'must be at most 255 characters').regex(printable, 'must be printable ASCII (e.g. image/png)'),
  upload_mode: z.enum(['single', 'multipart']).optional(),
});
export type PresignBody = z.infer<typeof presignBodySchema>;

export interface Caller {
  kind: string;
  teamId: string;
  userId?: string | undefined;
  credentialId?: string | undefined;
}

export interface PresignResult {
  key: string;
  /** null for upload_mode multipart. */
  uploadUrl: string | null;
  uploadHeaders: Record<string, string>;
  /** ISO; when the upload URL stops working (the key itself stays valid until the row expires). */
  uploadExpiresAt: string | null;
  /** ISO; when the staged key expires. */
  expiresAt: string;
  uploadMode: 'single' | 'multipart';
}

export type { StagedRow } from './store.js';

export interface FileStagingOptions {
  records: FilesStore;
  store: ObjectStore;
  /** GANTRY_MAX_UPLOAD_BYTES: the single-part cap. */
  maxUploadBytes: number;
  /** GANTRY_INPUT_RETENTION_S. */
  retentionS: number;
  /** Lifetime of a presigned single-part PUT URL. Default 3600 s (capped by retentionS). */
  uploadUrlTtlS?: number;
  now: () => number;
  logger: Logger;
}

const ENDPOINT: Record<StagePurpose, string> = { input: 'POST /r/files/presign', model: 'POST /models/presign', node: 'POST /nodes/presign' };
const mb = (n: number): string => `${Math.round((n / 1024 / 1024) * 10) / 10} MB`;

export class FileStaging {
  constructor(private readonly o: FileStagingOptions) {}

  get maxUploadBytes(): number {
    return this.o.maxUploadBytes;
  }

  parseBody(body: unknown): PresignBody {
    const r = presignBodySchema.safeParse(body ?? {});
    if (!r.success) throw fromZodIssues(r.error.issues);
    return r.data;
  }

  async presign(caller: Caller, purpose: StagePurpose, body: PresignBody): Promise<PresignResult> {
    const mode = body.upload_mode ?? 'single';
    const cap = this.o.maxUploadBytes;
    if (mode === 'single' && body.file_size > cap) {
      const how =
        caller.kind === 'user'
          ? `upload it in parts: call ${ENDPOINT[purpose]} with upload_mode "multipart", then POST /uploads/multipart/initiate with the returned key`
          : 'multipart uploads (POST /uploads/multipart/*) need a user session (JWT); integration and device credentials are limited to single-part uploads';
      throw new AppError('bad_request', 'file_too_large', `file_size: ${body.file_size} bytes exceeds the single-part upload limit of ${cap} bytes (${mb(cap)}); ${how}`);
    }
    if (mode === 'multipart') {
      if (caller.kind !== 'user') throw badRequest('multipart_requires_jwt', 'upload_mode: multipart uploads need a user session (JWT); integration and device credentials use single-part uploads');
      if (body.file_size > MAX_MULTIPART_BYTES) throw new AppError('bad_request', 'file_too_large', `file_size: ${body.file_size} bytes exceeds the object store maximum of ${MAX_MULTIPART_BYTES} bytes (5 TiB)`);
    }
    const now = this.o.now();
    const key = stagedKey(caller.teamId, purpose, body.file_name, now);
    const expiresAt = now + this.o.retentionS * 1000;
    await this.o.records.insertStaged({
      fileKey: key,
      teamId: caller.teamId,
      purpose,
      fileName: key.slice(key.lastIndexOf('/') + 1),
      contentType: body.content_type,
      fileSize: body.file_size,
      expiresAt,
      userId: caller.userId ?? null,
      credentialId: caller.credentialId ?? null,
    });
    if (mode === 'multipart') return { key, uploadUrl: null, uploadHeaders: {}, uploadExpiresAt: null, expiresAt: new Date(expiresAt).toISOString(), uploadMode: mode };
    const ttl = Math.max(1, Math.min(this.o.uploadUrlTtlS ?? 3600, this.o.retentionS));
    const p = await this.o.store.presignPut(key, { contentLength: body.file_size, contentType: body.content_type, expiresInS: ttl });
    return { key, uploadUrl: p.url, uploadHeaders: p.headers, uploadExpiresAt: new Date(p.expiresAt).toISOString(), expiresAt: new Date(expiresAt).toISOString(), uploadMode: mode };
  }

  /**
   * The FileLookup of the run endpoint: input keys of this team whose object exists. Keys of other
   * teams, unknown keys and keys whose upload never happened are simply absent (the resolver
   * answers all three with the same 400); expired rows not yet swept come back with their
   * expires_at (400 "has expired").
   */
  async lookup(teamId: string, fileKeys: string[]): Promise<Map<string, StagedFile>> {
    const out = new Map<string, StagedFile>();
    const keys = [...new Set(fileKeys)].filter((k) => isTeamKey(teamId, k)).slice(0, 1000);
    if (keys.length === 0) return out;
    for (const r of await this.o.records.stagedInputs(teamId, keys)) {
      if (r.expiresAt > this.o.now() && (await this.o.store.head(r.fileKey)) === null) continue;
      out.set(r.fileKey, { fileKey: r.fileKey, teamId: r.teamId, contentType: r.contentType, fileName: r.fileName, expiresAt: r.expiresAt });
    }
    return out;
  }

  /** The staged row of this team for key (any purpose unless given), or null; expired rows count as absent. */
  async staged(teamId: string, key: string, purpose?: StagePurpose): Promise<StagedRow | null> {
    if (!isTeamKey(teamId, key)) return null;
    const r = await this.o.records.staged(teamId, key);
    if (!r || (purpose !== undefined && r.purpose !== purpose) || r.expiresAt <= this.o.now()) return null;
    return r;
  }

  /** Throws the 400 a registry create gives for a storage_key that is not a live staged key of this purpose. */
  async requireStaged(teamId: string, key: string, purpose: StagePurpose, field = 'storage_key'): Promise<StagedRow> {
    const r = await this.staged(teamId, key, purpose);
    if (!r) throw invalidParameter(`${field}: ${JSON.stringify(key.slice(0, 300))} not found or expired; get one from ${ENDPOINT[purpose]} and upload the file first`);
    return r;
  }

  /**
   * Deletes expired staged rows and their objects (and any multipart upload still open on them).
   * Input keys referenced by a task that is not terminal yet are kept until it ends.
   */
  async sweep(limit = 500): Promise<number> {
    const keys = await this.o.records.sweepStaged(this.o.now(), limit);
    let n = 0;
    for (const key of keys) {
      try {
        for (const uploadId of await this.o.records.deleteMultipartsOfKey(key)) await this.o.store.abortMultipart(key, uploadId).catch(() => undefined);
        await this.o.store.delete(key);
        n++;
      } catch (e) {
        this.o.logger.warn({ err: e, key }, 'staged file sweep: object delete failed');
      }
    }
    return n;
  }
}

/** The part size for a multipart upload: at least 8 MiB, large enough for at most 10,000 parts. */
export function partSizing(fileSize: number): { partSize: number; partCount: number } {
  const MIN = 8 * 1024 * 1024;
  let partSize = Math.max(MIN, Math.ceil(fileSize / MAX_PARTS));
  // round up to a whole MiB for readability
  partSize = Math.ceil(partSize / (1024 * 1024)) * 1024 * 1024;
  if (partSize > MAX_PART_BYTES) throw new AppError('bad_request', 'file_too_large', `file_size: ${fileSize} bytes needs parts larger than 5 GiB`);
  return { partSize, partCount: Math.max(1, Math.ceil(fileSize / partSize)) };
}
