/**
 * Comfy Cloud's upload limits (github.com/Comfy-Org/docs openapi-cloud.yaml, POST /api/upload/image
 * and /api/upload/mask): "Maximum file size: 50 MB; Maximum width/height per edge: 16384 px; Maximum
 * total pixel count: 64 megapixels (67108864 pixels). Uploads that exceed any of these limits are
 * rejected with HTTP 400." Gantry checks them before it calls the provider: at the run request when
 * the staged file shows it (size, and the image header for the dimensions), else in the dispatcher
 * before the first provider call. 50 MB is read as 50,000,000 bytes (the stricter reading).
 */
import type { ObjectStore } from '../storage/port.js';

export const CLOUD_MAX_UPLOAD_BYTES = 50_000_000;
export const CLOUD_MAX_EDGE_PX = 16_384;
export const CLOUD_MAX_PIXELS = 67_108_864;
/** How much of a file's head is enough to find its dimensions (JPEG metadata can push SOF far). */
export const IMAGE_HEAD_BYTES = 512 * 1024;

/** Width and height from a PNG, JPEG, GIF or WebP header; null when the bytes are none of those (or truncated). */
export function imageDimensions(b: Buffer): { width: number; height: number } | null {
  // PNG: signature, then the IHDR chunk (width, height as big-endian u32)
  if (b.length >= 24 && b.readUInt32BE(0) === 0x89504e47 && b.toString('latin1', 12, 16) === 'IHDR') return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
  // GIF: logical screen width/height, little-endian u16
  if (b.length >= 10 && (b.toString('latin1', 0, 6) === 'GIF87a' || b.toString('latin1', 0, 6) === 'GIF89a')) return { width: b.readUInt16LE(6), height: b.readUInt16LE(8) };
  // WebP: RIFF....WEBP then VP8 / VP8L / VP8X
  if (b.length >= 30 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP') {
    const kind = b.toString('latin1', 12, 16);
    if (kind === 'VP8X') return { width: 1 + b.readUIntLE(24, 3), height: 1 + b.readUIntLE(27, 3) };
    if (kind === 'VP8L' && b[20] === 0x2f) {
      const bits = b.readUInt32LE(21);
      return { width: 1 + (bits & 0x3fff), height: 1 + ((bits >> 14) & 0x3fff) };
    }
    if (kind === 'VP8 ') return { width: b.readUInt16LE(26) & 0x3fff, height: b.readUInt16LE(28) & 0x3fff };
    return null;
  }
  // JPEG: walk the segments to the first start-of-frame (SOF0..SOF15 except DHT, JPG, DAC)
  if (b.length >= 4 && b[0] === 0xff && b[1] === 0xd8) {
    let i = 2;
    while (i + 9 < b.length) {
      if (b[i] !== 0xff) return null;
      const marker = b[i + 1]!;
      if (marker === 0xff) {
        i++;
        continue;
      }
      if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) return { width: b.readUInt16BE(i + 7), height: b.readUInt16BE(i + 5) };
      if (marker === 0xd8 || (marker >= 0xd0 && marker <= 0xd7) || marker === 0x01) {
        i += 2;
        continue;
      }
      i += 2 + b.readUInt16BE(i + 2);
    }
  }
  return null;
}

/** Why Comfy Cloud would refuse this upload (a message naming the limit), or null. */
export function cloudUploadProblem(what: string, size: number | null, dims: { width: number; height: number } | null): string | null {
  const src = 'Comfy Cloud accepts uploads up to 50 MB, 16384 px per edge and 64 megapixels (openapi-cloud.yaml POST /api/upload/image)';
  if (size !== null && size > CLOUD_MAX_UPLOAD_BYTES) return `${what} is ${size} bytes; ${src}`;
  if (dims && (dims.width > CLOUD_MAX_EDGE_PX || dims.height > CLOUD_MAX_EDGE_PX)) return `${what} is ${dims.width}x${dims.height} px; ${src}`;
  if (dims && dims.width * dims.height > CLOUD_MAX_PIXELS) return `${what} is ${dims.width}x${dims.height} px (${((dims.width * dims.height) / 1e6).toFixed(1)} megapixels); ${src}`;
  return null;
}

/**
 * The run request's check of one staged input (dispatch_target comfy_cloud): its size from the
 * object store and its dimensions from the first IMAGE_HEAD_BYTES. null when within the limits or
 * not known here (the dispatcher checks the whole file again before its first provider call).
 */
export async function stagedInputProblem(objects: Pick<ObjectStore, 'head' | 'get'>, fileKey: string, what: string): Promise<string | null> {
  const info = await objects.head(fileKey);
  if (!info) return null;
  const bySize = cloudUploadProblem(what, info.size, null);
  if (bySize) return bySize;
  const head = await readHead(await objects.get(fileKey), IMAGE_HEAD_BYTES);
  return cloudUploadProblem(what, null, imageDimensions(head));
}

async function readHead(body: NodeJS.ReadableStream, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  try {
    for await (const c of body as AsyncIterable<Buffer | string>) {
      const b = typeof c === 'string' ? Buffer.from(c) : c;
      chunks.push(b);
      n += b.length;
      if (n >= limit) break;
    }
  } finally {
    const d = body as NodeJS.ReadableStream & { destroy?: () => void };
    d.destroy?.();
  }
  return Buffer.concat(chunks).subarray(0, limit);
}
