/**
 * Files the nerfstudio executor handles besides the CLIs: a minimal POSIX ustar writer and reader
 * (the checkpoint archive: config.yml + the latest .ckpt + what a resume needs) and the
 * "meaningful tail" of a tool's output that becomes the task's error (secrets redacted).
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, stat } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';

const BLOCK = 512;

function header(name: string, size: number, mtime: number): Buffer {
  if (Buffer.byteLength(name) > 100) throw new Error(`tar: name too long: ${name}`);
  const h = Buffer.alloc(BLOCK, 0);
  const put = (s: string, off: number, len: number): void => {
    h.write(s.slice(0, len), off, len, 'utf8');
  };
  const octal = (n: number, len: number): string => n.toString(8).padStart(len - 1, '0');
  put(name, 0, 100);
  put(octal(0o644, 8), 100, 8);
  put(octal(0, 8), 108, 8);
  put(octal(0, 8), 116, 8);
  put(octal(size, 12), 124, 12);
  put(octal(Math.floor(mtime / 1000), 12), 136, 12);
  h.fill(0x20, 148, 156); // checksum counted as spaces
  put('0', 156, 1);
  put('ustar\u000000', 257, 8);
  let sum = 0;
  for (const b of h) sum += b;
  put(`${sum.toString(8).padStart(6, '0')}\u0000 `, 148, 8);
  return h;
}

/** Writes a tar of files (archive name -> local path), streaming each file. */
export async function writeTar(dest: string, entries: ReadonlyArray<{ name: string; path: string }>): Promise<number> {
  const out = createWriteStream(dest);
  const write = (b: Buffer): Promise<void> => new Promise((resolve, reject) => out.write(b, (e) => (e ? reject(e) : resolve())));
  try {
    for (const e of entries) {
      const st = await stat(e.path);
      await write(header(e.name, st.size, st.mtimeMs));
      await pipeline(createReadStream(e.path), out, { end: false });
      const pad = (BLOCK - (st.size % BLOCK)) % BLOCK;
      if (pad) await write(Buffer.alloc(pad));
    }
    await write(Buffer.alloc(BLOCK * 2));
  } finally {
    await new Promise<void>((resolve) => out.end(resolve));
  }
  return (await stat(dest)).size;
}

/** Extracts a tar written by writeTar (plain files only; names must stay inside destDir). Returns the names. */
export async function extractTar(src: string, destDir: string): Promise<string[]> {
  const fh = await open(src, 'r');
  const names: string[] = [];
  try {
    let pos = 0;
    const h = Buffer.alloc(BLOCK);
    for (;;) {
      const { bytesRead } = await fh.read(h, 0, BLOCK, pos);
      if (bytesRead < BLOCK || h.every((b) => b === 0)) break;
      const name = h.subarray(0, 100).toString('utf8').replace(/\0.*$/s, '');
      const size = parseInt(h.subarray(124, 136).toString('ascii').replace(/\0.*$/s, '').trim() || '0', 8);
      const type = String.fromCharCode(h[156] ?? 0x30);
      pos += BLOCK;
      const target = path.resolve(destDir, name);
      if ((type === '0' || type === '\0') && target.startsWith(path.resolve(destDir) + path.sep)) {
        await mkdir(path.dirname(target), { recursive: true });
        const out = await open(target, 'w');
        try {
          const buf = Buffer.alloc(1 << 20);
          let left = size;
          let at = pos;
          while (left > 0) {
            const { bytesRead: n } = await fh.read(buf, 0, Math.min(buf.length, left), at);
            if (n === 0) throw new Error(`tar: ${name} is truncated`);
            await out.write(buf.subarray(0, n));
            left -= n;
            at += n;
          }
        } finally {
          await out.close();
        }
        names.push(name);
      }
      pos += Math.ceil(size / BLOCK) * BLOCK;
    }
  } finally {
    await fh.close();
  }
  return names;
}

const ANSI = /\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07/g;
/** Lines that carry no message: rules and boxes, LocalWriter's table, progress bars, blanks. */
const NOISE = [/^[\s─━═│┃╭╮╰╯╷╵┌┐└┘|+\-=]*$/, /^\s*Step \(% Done\)/, /^\s*\d+ \(\d+(\.\d+)?%\)/, /━{5,}.*\d+%/];

/**
 * Removes what must not reach a task error: query strings and user info of URLs (signed URLs),
 * Gantry credentials, bearer tokens, `key=value` secrets; `extra` strings (e.g. the spec's data.url)
 * are replaced wherever they appear.
 */
export function redactText(s: string, extra: readonly string[] = []): string {
  let out = s;
  for (const e of extra) if (e.length >= 8) out = out.split(e).join(redactUrl(e));
  return out
    .replace(/\b(https?:\/\/)[^\s/@'"]+@/gi, '$1')
    .replace(/\b(https?:\/\/[^\s?'"#]+)\?[^\s'"]*/gi, '$1?[redacted]')
    .replace(/\b(ak|sk|dk)-[A-Za-z0-9_-]{8,}/g, '$1-[redacted]')
    .replace(/\bBearer\s+\S+/gi, 'Bearer [redacted]')
    .replace(/\b(api[_-]?key|token|secret|password|passwd|authorization)(["']?\s*[=:]\s*["']?)[^\s"',]+/gi, '$1$2[redacted]');
}

function redactUrl(u: string): string {
  try {
    const x = new URL(u);
    return `${x.protocol}//${x.host}${x.pathname}${x.search ? '?[redacted]' : ''}`;
  } catch {
    return '[redacted]';
  }
}

/** Collects a tool's stdout and stderr (interleaved, in arrival order) and gives the last meaningful lines. */
export class ToolOutput {
  private lines: string[] = [];
  private partial = new Map<string, string>();
  constructor(private readonly max = 400) {}

  push(stream: 'stdout' | 'stderr', chunk: string): void {
    const parts = ((this.partial.get(stream) ?? '') + chunk).split(/\r\n|\r|\n/);
    this.partial.set(stream, (parts.pop() ?? '').slice(-65_536));
    for (const p of parts) this.add(p);
  }

  private add(raw: string): void {
    const line = raw.replace(ANSI, '').replace(/\s+$/, '');
    if (NOISE.some((r) => r.test(line))) return;
    this.lines.push(line.replace(/^\[\d\d:\d\d:\d\d\]\s*/, '').replace(/\s{2,}\S+\.py:\d+$/, ''));
    if (this.lines.length > this.max) this.lines.splice(0, this.lines.length - this.max);
  }

  /** The last n meaningful lines (a Python traceback is cut to its last frames and the exception). */
  tail(n: number, redact: readonly string[] = []): string {
    for (const [k, v] of this.partial) {
      if (v) this.add(v);
      this.partial.set(k, '');
    }
    return redactText(this.lines.slice(-n).join('\n'), redact);
  }
}
