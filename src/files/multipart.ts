/**
 * Multipart uploads (JWT only; the routes say so): initiate on a key a presign endpoint staged,
 * presign the parts (each part's Content-Length is signed: part_size for every part but the last,
 * the remainder for the last), complete with the part ETags, or abort. Both object store drivers.
 */
import { z } from 'zod';
import type { Database } from '../persistence/db.js';
import { q } from '../persistence/sql.js';
import type { ObjectStore } from '../storage/port.js';
import { AppError, conflict, fromZodIssues, invalidParameter, notFound } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { partSizing, type Caller, type FileStaging } from './staging.js';

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

interface UploadRow {
  uploadId: string;
  teamId: string;
  storageKey: string;
  fileSize: number;
  partSize: number;
  partCount: number;
}

export interface MultipartOptions {
  db: Database;
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
    await q(this.o.db)(
      `insert into multipart_uploads (upload_id, team_id, storage_key, user_id, file_size, part_size, part_count, expires_at) values (?, ?, ?, ?, ?, ?, ?, ?)`,
      [uploadId, caller.teamId, b.storage_key, caller.userId ?? null, b.file_size, partSize, partCount, new Date(staged.expiresAt)],
    );
    return { upload_id: uploadId, storage_key: b.storage_key, part_size: partSize, part_count: partCount };
  }

  private async upload(teamId: string, uploadId: string, storageKey: string): Promise<UploadRow> {
    const rows = await q(this.o.db)('select * from multipart_uploads where upload_id = ? and team_id = ? and storage_key = ?', [uploadId, teamId, storageKey]);
    const r = rows[0];
    if (!r || new Date(r.expires_at).getTime() <= this.o.now()) throw notFound('multipart upload', 'upload_not_found');
    return { uploadId: r.upload_id, teamId: r.team_id, storageKey: r.storage_key, fileSize: Number(r.file_size), partSize: Number(r.part_size), partCount: Number(r.part_count) };
  }

  private partLength(u: UploadRow, n: number): number {
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
    await q(this.o.db)('delete from multipart_uploads where upload_id = ?', [u.uploadId]);
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
    await q(this.o.db)('delete from multipart_uploads where upload_id = ?', [u.uploadId]);
    return { is_success: true };
  }

  /** Aborts uploads whose staged key expired (their parts would otherwise linger). */
  async sweep(limit = 500): Promise<number> {
    const rows = await q(this.o.db)('delete from multipart_uploads where upload_id in (select upload_id from multipart_uploads where expires_at <= ? order by expires_at limit ?) returning upload_id, storage_key', [
      new Date(this.o.now()),
      limit,
    ]);
    for (const r of rows) {
      await this.o.store.abortMultipart(r.storage_key as string, r.upload_id as string).catch((e: unknown) => this.o.logger.warn({ err: e, key: r.storage_key }, 'multipart sweep: abort failed'));
    }
    return rows.length;
  }
}
