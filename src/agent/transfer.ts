/**
 * Input downloads and output uploads against presigned URLs, streamed from/to disk (never a whole
 * file in memory).
 */
import { createWriteStream, openAsBlob } from 'node:fs';
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
 * PUT a file to a presigned URL with every signed header verbatim. Content-Length comes from the
 * file (a Blob backed by the file: streamed, sized). 412 (If-None-Match: the key exists) means an
 * earlier attempt of this very upload already landed: treated as done.
 */
export async function uploadFile(url: string, headers: Record<string, string>, file: string, contentType: string, signal: AbortSignal, timeoutMs = 30 * 60_000): Promise<void> {
  const blob = await openAsBlob(file, { type: contentType });
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
