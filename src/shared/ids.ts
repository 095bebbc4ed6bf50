import { randomFillSync } from 'node:crypto';

let lastMs = 0;
let seq = 0;

/** Randomness drawn 4 KiB at a time: one syscall per 256 ids instead of two per id (ids are minted per request). */
const pool = Buffer.allocUnsafe(4096);
let poolAt = pool.length;
function randomInto(b: Buffer): void {
  if (poolAt + b.length > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  pool.copy(b, 0, poolAt, poolAt + b.length);
  poolAt += b.length;
}

/** RFC 9562 UUID version 7: 48-bit unix ms, then randomness; monotonic within a process. */
export function uuidv7(now: number = Date.now()): string {
  const b = Buffer.allocUnsafe(16);
  randomInto(b);
  if (now <= lastMs) {
    seq = (seq + 1) & 0xfff;
    if (seq === 0) lastMs += 1;
    now = lastMs;
  } else {
    lastMs = now;
    seq = b.readUInt16BE(14) & 0x7ff; // a random start within the new millisecond
  }
  b.writeUIntBE(now, 0, 6);
  b[6] = 0x70 | ((seq >> 8) & 0x0f);
  b[7] = seq & 0xff;
  b[8] = 0x80 | ((b[8] ?? 0) & 0x3f);
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (s: string): boolean => UUID_RE.test(s);
