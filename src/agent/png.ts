/**
 * A tiny, dependency-free PNG encoder (8-bit truecolour, no interlace) plus a deterministic
 * "render" used by the simulate executor and the ComfyUI stand-in.
 */
import { createHash } from 'node:crypto';
import zlib from 'node:zlib';

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

let crcTable: Uint32Array | undefined;
function crc32Fallback(buf: Uint8Array): number {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let c = 0xffffffff;
  for (const b of buf) c = (crcTable[(c ^ b) & 0xff] ?? 0) ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** CRC-32 as used by PNG chunks (zlib.crc32 on Node >= 20.15, a table otherwise). */
export function crc32(buf: Uint8Array): number {
  const native = (zlib as { crc32?: (data: Uint8Array) => number }).crc32;
  return typeof native === 'function' ? native(buf) >>> 0 : crc32Fallback(buf);
}

function chunk(type: string, data: Buffer): Buffer {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'latin1');
  data.copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

/**
 * Encodes packed RGB (3 bytes per pixel, row-major) as a PNG.
 * `text` entries become tEXt chunks (latin1 keywords/values).
 */
export function encodePng(width: number, height: number, rgb: Uint8Array, text: Record<string, string> = {}): Buffer {
  if (!Number.isInteger(width) || !Number.isInteger(height) || width <= 0 || height <= 0) {
    throw new RangeError(`invalid PNG size ${width}x${height}`);
  }
  if (rgb.length !== width * height * 3) throw new RangeError(`expected ${width * height * 3} RGB bytes, got ${rgb.length}`);
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // colour type: truecolour
  ihdr[10] = 0; // compression
  ihdr[11] = 0; // filter
  ihdr[12] = 0; // interlace
  const stride = width * 3;
  const raw = Buffer.alloc((stride + 1) * height);
  for (let y = 0; y < height; y++) {
    raw[y * (stride + 1)] = 0; // filter type None
    raw.set(rgb.subarray(y * stride, (y + 1) * stride), y * (stride + 1) + 1);
  }
  const chunks = [chunk('IHDR', ihdr)];
  for (const [k, v] of Object.entries(text)) {
    chunks.push(chunk('tEXt', Buffer.concat([Buffer.from(k.slice(0, 79), 'latin1'), Buffer.from([0]), Buffer.from(v, 'latin1')])));
  }
  chunks.push(chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0)));
  return Buffer.concat([PNG_SIGNATURE, ...chunks]);
}

/** Key-sorted JSON, so equal parameter objects always give equal seeds. */
export function stableStringify(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(stableStringify).join(',')}]`;
  const obj = value as Record<string, unknown>;
  return `{${Object.keys(obj)
    .sort()
    .filter((k) => obj[k] !== undefined)
    .map((k) => `${JSON.stringify(k)}:${stableStringify(obj[k])}`)
    .join(',')}}`;
}

export interface RenderOptions {
  width?: number;
  height?: number;
  text?: Record<string, string>;
}

/**
 * Renders a deterministic RGB image from a seed: a two-colour diagonal gradient with concentric
 * rings and a checker overlay, all parameters derived from sha256(seed). Same seed, same bytes.
 */
export function renderSeededPng(seed: string | unknown, opts: RenderOptions = {}): Buffer {
  const width = opts.width ?? 64;
  const height = opts.height ?? 64;
  const seedStr = typeof seed === 'string' ? seed : stableStringify(seed);
  const h = createHash('sha256').update(seedStr).digest();
  const b = (i: number): number => h[i % h.length] ?? 0;
  const c1 = [b(0), b(1), b(2)] as const;
  const c2 = [b(3), b(4), b(5)] as const;
  const ring = [b(6), b(7), b(8)] as const;
  const cx = (b(9) / 255) * width;
  const cy = (b(10) / 255) * height;
  const period = 4 + (b(11) % 12);
  const checker = 2 + (b(12) % 6);
  const rgb = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const t = (x + y) / Math.max(1, width + height - 2);
      const d = Math.hypot(x - cx, y - cy);
      const inRing = Math.floor(d / period) % 2 === 0;
      const inCheck = (Math.floor(x / checker) + Math.floor(y / checker)) % 2 === 0;
      const o = (y * width + x) * 3;
      for (let ch = 0; ch < 3; ch++) {
        let v = c1[ch]! * (1 - t) + c2[ch]! * t;
        if (inRing) v = v * 0.6 + ring[ch]! * 0.4;
        if (inCheck) v = v * 0.92;
        rgb[o + ch] = Math.max(0, Math.min(255, Math.round(v)));
      }
    }
  }
  return encodePng(width, height, rgb, opts.text);
}

export interface DecodedPngInfo {
  width: number;
  height: number;
  bitDepth: number;
  colorType: number;
  chunks: string[];
  /** Inflated IDAT stream (filter bytes included). */
  raw: Buffer;
}

/** Structural PNG check used by tests and the stand-in: signature, chunk CRCs, IHDR, IDAT inflate. */
export function inspectPng(buf: Buffer): DecodedPngInfo {
  if (buf.length < 8 || !buf.subarray(0, 8).equals(PNG_SIGNATURE)) throw new Error('not a PNG: bad signature');
  let off = 8;
  const chunks: string[] = [];
  const idat: Buffer[] = [];
  let ihdr: Buffer | undefined;
  while (off < buf.length) {
    if (off + 12 > buf.length) throw new Error('truncated chunk');
    const len = buf.readUInt32BE(off);
    const type = buf.toString('latin1', off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    const crc = buf.readUInt32BE(off + 8 + len);
    if (crc !== crc32(buf.subarray(off + 4, off + 8 + len))) throw new Error(`bad CRC in ${type} chunk`);
    chunks.push(type);
    if (type === 'IHDR') ihdr = Buffer.from(data);
    if (type === 'IDAT') idat.push(Buffer.from(data));
    off += 12 + len;
    if (type === 'IEND') break;
  }
  if (!ihdr || chunks[0] !== 'IHDR') throw new Error('IHDR must come first');
  if (chunks[chunks.length - 1] !== 'IEND') throw new Error('missing IEND');
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const width = ihdr.readUInt32BE(0);
  const height = ihdr.readUInt32BE(4);
  const bitDepth = ihdr[8] ?? 0;
  const colorType = ihdr[9] ?? 0;
  const channels = colorType === 2 ? 3 : colorType === 6 ? 4 : colorType === 0 ? 1 : colorType === 4 ? 2 : 1;
  const expected = (width * channels * (bitDepth / 8) + 1) * height;
  if (bitDepth === 8 && raw.length !== expected) throw new Error(`IDAT size ${raw.length} != ${expected}`);
  return { width, height, bitDepth, colorType, chunks, raw };
}
