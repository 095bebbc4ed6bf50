/**
 * The staging use cases: a presigned upload of an input file (POST /r/files/presign, the MCP tool
 * create_upload) and of a model or custom node package (the registries' presign routes). The
 * staging itself (keys, limits, the staged_files row) is src/files/staging.ts.
 */
import type { TeamPrincipal } from '../identity/principal.js';
import type { Caller, PresignBody, PresignResult } from '../files/staging.js';
import type { StagePurpose } from '../files/keys.js';

/** The file staging (src/files/staging.ts FileStaging). */
export interface Staging {
  parseBody(body: unknown): PresignBody;
  presign(caller: Caller, purpose: StagePurpose, body: PresignBody): Promise<PresignResult>;
}

/** The staging's view of a caller: kind, team, and the user or credential when there is one. */
export const fileCaller = (p: TeamPrincipal): Caller => ({ kind: p.kind, teamId: p.teamId, ...(p.userId ? { userId: p.userId } : {}), ...(p.credentialId ? { credentialId: p.credentialId } : {}) });

/** The presign response: the key under `keyField` (file_key or storage_key), the URL and its headers. */
export function presignReply(r: PresignResult, keyField: 'file_key' | 'storage_key'): Record<string, unknown> {
  return {
    [keyField]: r.key,
    upload_url: r.uploadUrl,
    upload_headers: r.uploadHeaders,
    upload_mode: r.uploadMode,
    upload_expires_at: r.uploadExpiresAt,
    expires_at: r.expiresAt,
  };
}

export class UploadUseCases {
  constructor(private readonly staging: Staging) {}

  /** Stages a file for `purpose`: the body (file_name, file_size, content_type) is validated here (400 naming the field). */
  async presign(p: TeamPrincipal, purpose: StagePurpose, body: unknown, keyField: 'file_key' | 'storage_key'): Promise<Record<string, unknown>> {
    return presignReply(await this.staging.presign(fileCaller(p), purpose, this.staging.parseBody(body)), keyField);
  }

  /** An input file for a run: its file_key is the value of a file parameter. */
  async createUpload(p: TeamPrincipal, body: unknown): Promise<Record<string, unknown>> {
    return this.presign(p, 'input', body, 'file_key');
  }
}

/** Multipart uploads (src/files/multipart.ts MultipartUploads); each validates its body (400 naming the field). */
export interface Multipart {
  initiate(caller: Caller, body: unknown): Promise<{ upload_id: string; storage_key: string; part_size: number; part_count: number }>;
  presignParts(caller: Caller, body: unknown): Promise<{ part_list: Array<{ part_number: number; upload_url: string; upload_headers: Record<string, string> }> }>;
  complete(caller: Caller, body: unknown): Promise<{ file_key: string; storage_key: string; file_size: number }>;
  abort(caller: Caller, body: unknown): Promise<{ is_success: true }>;
}

/** The multipart use cases (JWT callers only: the routes' auth). */
export class MultipartUseCases {
  constructor(private readonly multipart: Multipart) {}

  async initiate(p: TeamPrincipal, body: unknown): Promise<{ upload_id: string; storage_key: string; part_size: number; part_count: number }> {
    return this.multipart.initiate(fileCaller(p), body);
  }

  async presignParts(p: TeamPrincipal, body: unknown): Promise<{ part_list: Array<{ part_number: number; upload_url: string; upload_headers: Record<string, string> }> }> {
    return this.multipart.presignParts(fileCaller(p), body);
  }

  /** The file_key shape of presign, with the stored key and size. */
  async complete(p: TeamPrincipal, body: unknown): Promise<{ file_key: string; storage_key: string; file_size: number }> {
    return this.multipart.complete(fileCaller(p), body);
  }

  async abort(p: TeamPrincipal, body: unknown): Promise<{ is_success: true }> {
    return this.multipart.abort(fileCaller(p), body);
  }
}
