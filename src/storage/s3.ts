/**
 * S3 driver (AWS S3 or any S3-compatible store: Ceph RGW, MinIO, R2...): @aws-sdk/client-s3 with
 * path-style addressing, presigned with @aws-sdk/s3-request-presigner. Presigned PUTs sign
 * content-length and if-none-match (and content-type when given) so the store itself enforces the
 * size, the no-overwrite rule and the header set.
 *
 * Flexible checksums are set to WHEN_REQUIRED: otherwise the SDK adds CRC32 headers/query
 * parameters to PutObject/UploadPart (and their presigned URLs), which older S3-compatible
 * servers reject and which a browser/agent PUT through a presigned URL cannot supply.
 */
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  ListPartsCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { AppError } from '../shared/errors.js';
import { contentDisposition } from './local.js';
import {
  MAX_PART_BYTES,
  MAX_SINGLE_PUT_BYTES,
  assertContentType,
  assertExpiry,
  assertKey,
  assertLength,
  assertPartNumber,
  assertPrefix,
  stripQuotes,
} from './port.js';
import type { ObjectInfo, ObjectStore, PresignedRequest } from './port.js';

export interface S3ObjectStoreOptions {
  bucket: string;
  endpoint?: string;
  region: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  forcePathStyle?: boolean;
  /** Key prefix inside the bucket (no leading/trailing slash needed), e.g. "gantry/prod". */
  prefix?: string;
}

interface SdkError {
  name?: string;
  Code?: string;
  message?: string;
  $metadata?: { httpStatusCode?: number };
}

function errInfo(e: unknown): { name: string; status: number; message: string } {
  const x = (typeof e === 'object' && e !== null ? e : {}) as SdkError;
  return { name: x.name ?? x.Code ?? '', status: x.$metadata?.httpStatusCode ?? 0, message: x.message ?? String(e) };
}

/** Maps S3 errors onto the port's AppError kinds; anything unknown becomes bad_gateway. */
function mapError(e: unknown): AppError {
  const { name, status, message } = errInfo(e);
  const snake = name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase() || 's3_error';
  if (name === 'NoSuchKey' || name === 'NotFound') return new AppError('not_found', 'no_such_key', 'The specified key does not exist.', { cause: e });
  if (name === 'NoSuchUpload') return new AppError('not_found', 'no_such_upload', message, { cause: e });
  if (name === 'NoSuchBucket') return new AppError('internal', 'no_such_bucket', message, { cause: e });
  if (name === 'PreconditionFailed' || status === 412) return new AppError('precondition_failed', 'precondition_failed', message, { cause: e });
  if (['InvalidPart', 'InvalidPartOrder', 'EntityTooSmall', 'EntityTooLarge', 'MalformedXML', 'InvalidArgument', 'InvalidRange'].includes(name) || status === 400) {
    return new AppError('bad_request', snake, message, { cause: e });
  }
  if (status === 403) return new AppError('internal', 's3_access_denied', `object store refused the server's credentials: ${message}`, { cause: e });
  return new AppError('bad_gateway', 's3_error', `object store error: ${name || status} ${message}`, { cause: e });
}

export class S3ObjectStore implements ObjectStore {
  readonly driver = 's3' as const;
  readonly client: S3Client;
  readonly bucket: string;
  private readonly prefix: string;

  constructor(o: S3ObjectStoreOptions) {
    this.bucket = o.bucket;
    const p = (o.prefix ?? '').replace(/^\/+|\/+$/g, '');
    this.prefix = p === '' ? '' : p + '/';
    this.client = new S3Client({
      region: o.region,
      ...(o.endpoint ? { endpoint: o.endpoint } : {}),
      forcePathStyle: o.forcePathStyle ?? true,
      ...(o.accessKeyId && o.secretAccessKey ? { credentials: { accessKeyId: o.accessKeyId, secretAccessKey: o.secretAccessKey } } : {}),
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    });
  }

  private k(key: string): string {
    assertKey(key);
    return this.prefix + key;
  }

  async presignPut(key: string, o: { contentLength: number; contentType?: string; expiresInS: number }): Promise<PresignedRequest> {
    const Key = this.k(key);
    assertLength(o.contentLength, MAX_SINGLE_PUT_BYTES, 'contentLength');
    assertContentType(o.contentType);
    assertExpiry(o.expiresInS);
    const signable = new Set(['if-none-match', 'content-length']);
    if (o.contentType !== undefined) signable.add('content-type');
    const expiresAt = Date.now() + o.expiresInS * 1000;
    const url = await getSignedUrl(
      this.client,
      new PutObjectCommand({ Bucket: this.bucket, Key, IfNoneMatch: '*', ContentLength: o.contentLength, ...(o.contentType !== undefined ? { ContentType: o.contentType } : {}) }),
      { expiresIn: o.expiresInS, signableHeaders: signable },
    );
    const headers: Record<string, string> = { 'Content-Length': String(o.contentLength), 'If-None-Match': '*' };
    if (o.contentType !== undefined) headers['Content-Type'] = o.contentType;
    return { url, headers, expiresAt };
  }

  async presignGet(key: string, o: { expiresInS: number; downloadName?: string }): Promise<string> {
    const Key = this.k(key);
    assertExpiry(o.expiresInS);
    return getSignedUrl(
      this.client,
      new GetObjectCommand({ Bucket: this.bucket, Key, ...(o.downloadName ? { ResponseContentDisposition: contentDisposition(o.downloadName) } : {}) }),
      { expiresIn: o.expiresInS },
    );
  }

  async head(key: string): Promise<ObjectInfo | null> {
    const Key = this.k(key);
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key }));
      return {
        size: r.ContentLength ?? 0,
        ...(r.ETag ? { etag: stripQuotes(r.ETag) } : {}),
        ...(r.ContentType ? { contentType: r.ContentType } : {}),
        ...(r.LastModified ? { lastModified: r.LastModified.getTime() } : {}),
      };
    } catch (e) {
      const { name, status } = errInfo(e);
      if (status === 404 || name === 'NotFound' || name === 'NoSuchKey') return null;
      throw mapError(e);
    }
  }

  async put(key: string, body: NodeJS.ReadableStream | Buffer, o: { contentLength: number; contentType?: string }): Promise<void> {
    const Key = this.k(key);
    assertLength(o.contentLength, MAX_SINGLE_PUT_BYTES, 'contentLength');
    assertContentType(o.contentType);
    try {
      await this.client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key,
          // the SDK streams a Readable body as is when ContentLength is given
          Body: body as Buffer,
          ContentLength: o.contentLength,
          ...(o.contentType !== undefined ? { ContentType: o.contentType } : {}),
        }),
      );
    } catch (e) {
      throw mapError(e);
    }
  }

  async get(key: string): Promise<NodeJS.ReadableStream> {
    const Key = this.k(key);
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key }));
      if (!r.Body) throw new AppError('bad_gateway', 's3_error', 'object store returned no body');
      return r.Body as NodeJS.ReadableStream;
    } catch (e) {
      if (e instanceof AppError) throw e;
      throw mapError(e);
    }
  }

  async delete(key: string): Promise<void> {
    const Key = this.k(key);
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key }));
    } catch (e) {
      if (errInfo(e).status === 404) return;
      throw mapError(e);
    }
  }

  async deletePrefix(prefix: string): Promise<number> {
    assertPrefix(prefix);
    const Prefix = this.prefix + prefix;
    let n = 0;
    try {
      // Listing restarts after each batch: deleting while paginating a live listing is fine on S3,
      // and restarting keeps this correct on stores whose continuation tokens go stale.
      for (;;) {
        const page = await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix, MaxKeys: 1000 }));
        const keys = (page.Contents ?? []).map((c) => c.Key).filter((x): x is string => typeof x === 'string');
        if (keys.length === 0) break;
        const r = await this.client.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: keys.map((Key) => ({ Key })), Quiet: true } }));
        const errs = r.Errors ?? [];
        if (errs.length > 0) throw new AppError('bad_gateway', 's3_error', `object store failed to delete ${errs.length} object(s): ${errs[0]?.Code ?? ''} ${errs[0]?.Message ?? ''}`);
        n += keys.length;
        if (!page.IsTruncated && keys.length < 1000) break;
      }
    } catch (e) {
      if (e instanceof AppError) throw e;
      throw mapError(e);
    }
    return n;
  }

  /** Keys starting with prefix ('' = every key; returned without the store's own prefix), in S3's order. */
  async listKeys(prefix: string): Promise<string[]> {
    if (prefix !== '') assertPrefix(prefix);
    const out: string[] = [];
    let ContinuationToken: string | undefined;
    try {
      do {
        const page = await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix + prefix, MaxKeys: 1000, ...(ContinuationToken ? { ContinuationToken } : {}) }));
        for (const c of page.Contents ?? []) if (typeof c.Key === 'string') out.push(c.Key.slice(this.prefix.length));
        ContinuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (ContinuationToken);
    } catch (e) {
      throw mapError(e);
    }
    return out;
  }

  async createMultipart(key: string, o: { contentType?: string }): Promise<{ uploadId: string }> {
    const Key = this.k(key);
    assertContentType(o.contentType);
    try {
      const r = await this.client.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key, ...(o.contentType !== undefined ? { ContentType: o.contentType } : {}) }));
      if (!r.UploadId) throw new AppError('bad_gateway', 's3_error', 'object store returned no UploadId');
      return { uploadId: r.UploadId };
    } catch (e) {
      if (e instanceof AppError) throw e;
      throw mapError(e);
    }
  }

  async presignPart(key: string, uploadId: string, partNumber: number, o: { contentLength?: number; expiresInS: number }): Promise<PresignedRequest> {
    const Key = this.k(key);
    assertPartNumber(partNumber);
    assertExpiry(o.expiresInS);
    if (o.contentLength !== undefined) assertLength(o.contentLength, MAX_PART_BYTES, 'contentLength');
    const expiresAt = Date.now() + o.expiresInS * 1000;
    const url = await getSignedUrl(
      this.client,
      new UploadPartCommand({ Bucket: this.bucket, Key, UploadId: uploadId, PartNumber: partNumber, ...(o.contentLength !== undefined ? { ContentLength: o.contentLength } : {}) }),
      { expiresIn: o.expiresInS, ...(o.contentLength !== undefined ? { signableHeaders: new Set(['content-length']) } : {}) },
    );
    return { url, headers: o.contentLength !== undefined ? { 'Content-Length': String(o.contentLength) } : {}, expiresAt };
  }

  async completeMultipart(key: string, uploadId: string, parts: Array<{ partNumber: number; etag: string }>): Promise<ObjectInfo> {
    const Key = this.k(key);
    if (parts.length === 0) throw new AppError('bad_request', 'malformed_xml', 'You must specify at least one part.');
    for (const p of parts) assertPartNumber(p.partNumber);
    try {
      await this.client.send(
        new CompleteMultipartUploadCommand({
          Bucket: this.bucket,
          Key,
          UploadId: uploadId,
          MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.partNumber, ETag: `"${stripQuotes(p.etag)}"` })) },
        }),
      );
    } catch (e) {
      const mapped = mapError(e);
      // Some stores (Ceph RGW Pacific) answer 500 "multipart completion is already in progress"
      // for an aborted or unknown upload: ask ListParts whether the upload still exists.
      if (mapped.kind === 'bad_gateway' && (await this.uploadGone(Key, uploadId))) {
        throw new AppError('not_found', 'no_such_upload', 'The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.', { cause: e });
      }
      throw mapped;
    }
    const info = await this.head(key);
    if (!info) throw new AppError('bad_gateway', 's3_error', 'object missing right after CompleteMultipartUpload');
    return info;
  }

  private async uploadGone(Key: string, uploadId: string): Promise<boolean> {
    try {
      await this.client.send(new ListPartsCommand({ Bucket: this.bucket, Key, UploadId: uploadId, MaxParts: 1 }));
      return false;
    } catch (e) {
      return errInfo(e).name === 'NoSuchUpload' || errInfo(e).status === 404;
    }
  }

  async abortMultipart(key: string, uploadId: string): Promise<void> {
    const Key = this.k(key);
    try {
      await this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key, UploadId: uploadId }));
    } catch (e) {
      throw mapError(e);
    }
  }

  async close(): Promise<void> {
    this.client.destroy();
  }
}
