/**
 * Input downloads and output uploads against presigned URLs, streamed from/to disk (never a whole
 * file in memory, but for an upload of at most SMALL_UPLOAD_BYTES).
 */
import { createWriteStream, openAsBlob } from 'node:fs';
import { open } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';

/** A transfer the other end answered with an HTTP error status (status; null: no status to go by). */
export class TransferError extends Error {
  constructor(
    message: string,
    readonly status: number | null = null,
  ) {
    super(message);
  }
}

/** GET url -> dest file. */
export async function downloadTo(url: string, dest: string, signal: AbortSignal, timeoutMs = 30 * 60_000): Promise<number> {
  const res = await fetch(url, { signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]) });
  if (!res.ok || !res.body) throw new TransferError(`download failed: HTTP ${res.status}`, res.status);
  let n = 0;
  const body = Readable.fromWeb(res.body as unknown as NodeReadableStream<Uint8Array>);
  body.on('data', (c: Buffer) => (n += c.length));
  await pipeline(body, createWriteStream(dest));
  return n;
}

/**
 * Files up to this size are read whole and sent as one buffer (one open, fstat, read and close,
 * no web stream per chunk: most outputs, an image or a short clip, are this small); larger ones
 * stream from a Blob backed by the file.
 */
export const SMALL_UPLOAD_BYTES = 4 * 1024 * 1024;

/** The file whole when it is at most SMALL_UPLOAD_BYTES, else a Blob backed by it (streamed, sized). */
async function uploadBody(file: string, contentType: string): Promise<Uint8Array<ArrayBuffer> | Blob> {
  const fh = await open(file, 'r');
  try {
    const { size } = await fh.stat();
    if (size <= SMALL_UPLOAD_BYTES) {
      const buf = new Uint8Array(size);
      let off = 0;
      while (off < size) {
        const { bytesRead } = await fh.read(buf, off, size - off, off);
        if (bytesRead === 0) break;
        off += bytesRead;
      }
      // a file that shrank meanwhile is sent as it is now (the presigned Content-Length then refuses it)
      return off === size ? buf : buf.subarray(0, off);
    }
  } finally {
    await fh.close();
  }
  return openAsBlob(file, { type: contentType });
}

/**
 * PUT a file to a presigned URL with every signed header verbatim. Content-Length comes from the
 * file (its bytes, or a Blob backed by it). 412 (If-None-Match: the key exists) means an earlier
 * attempt of this very upload already landed: treated as done.
 */
export async function uploadFile(url: string, headers: Record<string, string>, file: string, contentType: string, signal: AbortSignal, timeoutMs = 30 * 60_000): Promise<void> {
  const blob = await uploadBody(file, contentType);
  const h: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() !== 'content-length' && k.toLowerCase() !== 'host') h[k] = v;
  const res = await fetch(url, { method: 'PUT', headers: h, body: blob, signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]) });
  if (res.status === 412) return;
  if (!res.ok) {
    const text = (await res.text().catch(() => '')).slice(0, 300);
    throw new TransferError(`upload failed: HTTP ${res.status}${text ? `: ${text}` : ''}`, res.status);
  }
  await res.arrayBuffer().catch(() => undefined);
}
