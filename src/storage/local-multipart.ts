/** Multipart upload files of the local object store (local.ts): uploads/<uploadId>/upload.json, <n>.part and <n>.json. */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import * as fsp from 'node:fs/promises';
import { join } from 'node:path';
import { MIN_PART_BYTES, assertPartNumber, stripQuotes } from './port.js';
import { WRITE_CHUNK, isErrno, noSuchUpload, s3err } from './local-io.js';

export const UPLOAD_ID_RE = /^[a-f0-9]{32}$/;

export interface PartMeta {
  size: number;
  etag: string;
}

/** The upload's upload.json; no_such_upload when it is missing or names another key. */
export async function readUpload(dir: string, key: string): Promise<{ key: string; contentType?: string }> {
  let u: { key: string; contentType?: string };
  try {
    u = JSON.parse(await fsp.readFile(join(dir, 'upload.json'), 'utf8')) as { key: string; contentType?: string };
  } catch (e) {
    if (isErrno(e, 'ENOENT')) throw noSuchUpload();
    throw e;
  }
  if (u.key !== key) throw noSuchUpload();
  return u;
}

/**
 * The metas of the parts a completion lists, checked as S3 does: ascending part numbers, each part
 * present with the given etag, every part but the last at least MIN_PART_BYTES.
 */
export async function readParts(dir: string, parts: Array<{ partNumber: number; etag: string }>): Promise<PartMeta[]> {
  const metas: PartMeta[] = [];
  let prev = 0;
  for (const p of parts) {
    assertPartNumber(p.partNumber);
    if (p.partNumber <= prev) throw s3err('bad_request', 'invalid_part_order', 'The list of parts was not in ascending order. The parts list must be specified in order by part number.');
    prev = p.partNumber;
    let m: PartMeta;
    try {
      m = JSON.parse(await fsp.readFile(join(dir, `${p.partNumber}.json`), 'utf8')) as PartMeta;
    } catch (e) {
      if (isErrno(e, 'ENOENT')) throw s3err('bad_request', 'invalid_part', `One or more of the specified parts could not be found (part ${p.partNumber}).`);
      throw e;
    }
    if (stripQuotes(p.etag) !== m.etag) {
      throw s3err('bad_request', 'invalid_part', `One or more of the specified parts could not be found or the specified entity tag might not have matched the part's entity tag (part ${p.partNumber}).`);
    }
    metas.push(m);
  }
  for (let i = 0; i < metas.length - 1; i++) {
    if ((metas[i]?.size ?? 0) < MIN_PART_BYTES) {
      throw s3err('bad_request', 'entity_too_small', `Your proposed upload is smaller than the minimum allowed object size: every part but the last must be at least ${MIN_PART_BYTES} bytes (part ${parts[i]?.partNumber}).`);
    }
  }
  return metas;
}

/** The bytes of the listed parts, in order. */
export async function* concatParts(dir: string, parts: Array<{ partNumber: number }>): AsyncGenerator<Buffer> {
  for (const p of parts) {
    for await (const c of createReadStream(join(dir, `${p.partNumber}.part`), { highWaterMark: WRITE_CHUNK })) yield c as Buffer;
  }
}

/** S3's multipart etag: the md5 of the parts' binary md5s, then "-<number of parts>". */
export function multipartEtag(metas: PartMeta[]): string {
  const md5s = createHash('md5');
  for (const m of metas) md5s.update(Buffer.from(m.etag, 'hex'));
  return `${md5s.digest('hex')}-${metas.length}`;
}
