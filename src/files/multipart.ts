/**
 * Multipart uploads (JWT only; the routes say so): initiate on a key a presign endpoint staged,
 * presign the parts (each part's Content-Length is signed: part_size for every part but the last,
 * the remainder for the last), complete with the part ETags, or abort. Both object store drivers.
 */
import { z } from 'zod';
import type { ObjectStore } from '../storage/port.js';
import { AppError, conflict, fromZodIssues, invalidParameter, notFound } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { partSizing, type Caller, type FileStaging } from './staging.js';
import type { FilesStore, MultipartRow } from './store.js';

const keySchema = z.string().min(1, 'must not be empty').max(1024, 'must be at most 1024 characters');
const uploadIdSchema = z.string().min(1, 'must not be empty').max(1024, 'must be at most 1024 characters');

export const initiateSchema = z.strictObject({ storage_key: keySchema, file_size: z.number().int('must be an integer').min(1, 'must be at least 1 byte') });
export const presignPartsSchema = z.strictObject({
  upload_id: uploadIdSchema,
  storage_key: keySchema,
  part_numbers: z.array(z.number().int('must be an integer').min(1, 'must be at least 1')).min(1, 'must list at least one part').max(1000, 'at most 1000 parts per call'),
});
export const completeSchema = z.strictObject({
  upload_id: uploadIdSchema,
  storage_key: keySchema,
  parts: z
    .array(z.strictObject({ part_number: z.number().int('must be an integer').min(1, 'must be at least 1'), etag: z.string().min(1, 'must not be empty').max(200, 'must be at most 200 characters') }))
    .min(1, 'must list every part')
    .max(10_000, 'at most 10000 parts'),
});
export const abortSchema = z.strictObject({ upload_id: uploadIdSchema, storage_key: keySchema });

const parse = <T>(s: z.ZodType<T>, body: unknown): T => {
  const r = s.safeParse(body ?? {});
  if (!r.success) throw fromZodIssues(r.error.issues);
  return r.data;
};

export interface MultipartOptions {
  records: FilesStore;
  store: ObjectStore;
  staging: FileStaging;
  /** Lifetime of presigned part URLs. Default 3600 s. */
  partUrlTtlS?: number;
  now: () => number;
  logger: Logger;
}

export class MultipartUploads {
  constructor(private readonly o: MultipartOptions) {}

  async initiate(caller: Caller, body: unknown): Promise<{ upload_id: string; storage_key: string; part_size: number; part_count: number }> {
    const b = parse(initiateSchema, body);
    const staged = await this.o.staging.staged(caller.teamId, b.storage_key);
    if (!staged)
      throw invalidParameter(
        `storage_key: ${JSON.stringify(b.storage_key.slice(0, 300))} not found or expired; get one from a presign endpoint (POST /r/files/presign, /models/presign or /nodes/presign) of this team first`,
      );
    if (b.file_size !== staged.fileSize) throw invalidParameter(`file_size: must equal the file_size given at presign (${staged.fileSize})`);
    if ((await this.o.store.head(b.storage_key)) !== null) throw conflict('object_exists', 'an object was already uploaded at this storage_key; presign a new key');
    const { partSize, partCount } = partSizing(b.file_size);
    const { uploadId } = await this.o.store.createMultipart(b.storage_key, { contentType: staged.contentType });
    await this.o.records.insertMultipart({ uploadId, teamId: caller.teamId, storageKey: b.storage_key, userId: caller.userId ?? null, fileSize: b.file_size, partSize, partCount, expiresAt: staged.expiresAt });
    return { upload_id: uploadId, storage_key: b.storage_key, part_size: partSize, part_count: partCount };
  }

  private async upload(teamId: string, uploadId: string, storageKey: string): Promise<MultipartRow> {
    const r = await this.o.records.multipart(teamId, uploadId, storageKey);
    if (!r || r.expiresAt <= this.o.now()) throw notFound('multipart upload', 'upload_not_found');
    return r;
  }

  private partLength(u: MultipartRow, n: number): number {
    return n < u.partCount ? u.partSize : u.fileSize - u.partSize * (u.partCount - 1);
  }

  async presignParts(caller: Caller, body: unknown): Promise<{ part_list: Array<{ part_number: number; upload_url: string; upload_headers: Record<string, string> }> }> {
    const b = parse(presignPartsSchema, body);
    const u = await this.upload(caller.teamId, b.upload_id, b.storage_key);
    const nums = [...new Set(b.part_numbers)].sort((x, y) => x - y);
    const bad = nums.find((n) => n > u.partCount);
    if (bad !== undefined) throw invalidParameter(`part_numbers: ${bad} is out of range; this upload has parts 1-${u.partCount}`);
    const part_list = [];
    for (const n of nums) {
      const p = await this.o.store.presignPart(u.storageKey, u.uploadId, n, { contentLength: this.partLength(u, n), expiresInS: this.o.partUrlTtlS ?? 3600 });
      part_list.push({ part_number: n, upload_url: p.url, upload_headers: p.headers });
    }
    return { part_list };
  }

  async complete(caller: Caller, body: unknown): Promise<{ file_key: string; storage_key: string; file_size: number }> {
    const b = parse(completeSchema, body);
    const u = await this.upload(caller.teamId, b.upload_id, b.storage_key);
    const parts = [...b.parts].sort((x, y) => x.part_number - y.part_number);
    for (let i = 0; i < parts.length; i++) {
      if (parts[i]?.part_number !== i + 1) throw invalidParameter(`parts: must list every part 1-${u.partCount} exactly once (part ${i + 1} is ${parts[i] ? 'listed twice or out of order' : 'missing'})`);
    }
    if (parts.length !== u.partCount) throw invalidParameter(`parts: must list every part 1-${u.partCount} exactly once (got ${parts.length})`);
    const info = await this.o.store.completeMultipart(
      u.storageKey,
      u.uploadId,
      parts.map((p) => ({ partNumber: p.part_number, etag: p.etag })),
    );
    await this.o.records.deleteMultipart(u.uploadId);
    if (info.size !== u.fileSize) {
      await this.o.store.delete(u.storageKey);
      throw new AppError('bad_request', 'size_mismatch', `the assembled object is ${info.size} bytes, not the ${u.fileSize} bytes given at initiate; upload again`);
    }
    return { file_key: u.storageKey, storage_key: u.storageKey, file_size: u.fileSize };
  }

  async abort(caller: Caller, body: unknown): Promise<{ is_success: true }> {
    const b = parse(abortSchema, body);
    const u = await this.upload(caller.teamId, b.upload_id, b.storage_key);
    await this.o.store.abortMultipart(u.storageKey, u.uploadId);
    await this.o.records.deleteMultipart(u.uploadId);
    return { is_success: true };
  }

  /** Aborts uploads whose staged key expired (their parts would otherwise linger). */
  async sweep(limit = 500): Promise<number> {
    const rows = await this.o.records.sweepMultipart(this.o.now(), limit);
    for (const r of rows) {
      await this.o.store.abortMultipart(r.storageKey, r.uploadId).catch((e: unknown) => this.o.logger.warn({ err: e, key: r.storageKey }, 'multipart sweep: abort failed'));
    }
    return rows.length;
  }
}
