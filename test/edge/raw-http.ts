import net from 'node:net';

export interface RawResult {
  /** Everything the server sent (latin1). */
  data: string;
  /** The server closed (FIN or reset) before the bound. */
  closed: boolean;
  /** The bound passed with the connection still open. */
  timedOut: boolean;
}

/**
 * Writes raw bytes (each element of parts in its own TCP write, after the previous one was flushed
 * and the next event-loop turn) and collects the answer until the server closes or boundMs passes.
 * With closeAfterFirst the client ends once it has one complete response (keep-alive answers).
 */
export function rawHttp(port: number, parts: Array<string | Buffer>, boundMs: number, closeAfterFirst = false): Promise<RawResult> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let data = '';
    let settled = false;
    const done = (closed: boolean, timedOut: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(t);
      s.destroy();
      resolve({ data, closed, timedOut });
    };
    const t = setTimeout(() => done(false, true), boundMs);
    s.on('data', (d) => {
      data += d.toString('latin1');
      if (closeAfterFirst && firstResponseComplete(data)) done(false, false);
    });
    s.on('error', () => done(true, false));
    s.on('close', () => done(true, false));
    s.on('connect', () => {
      const bufs = parts.map((p) => (typeof p === 'string' ? Buffer.from(p, 'latin1') : p));
      const next = (i: number): void => {
        if (i >= bufs.length || settled) return;
        s.write(bufs[i]!, () => setImmediate(() => next(i + 1)));
      };
      next(0);
    });
  });
}

function firstResponseComplete(data: string): boolean {
  const end = data.indexOf('\r\n\r\n');
  if (end < 0) return false;
  const m = /\r\ncontent-length:\s*(\d+)/i.exec(data.slice(0, end));
  return m !== null && data.length >= end + 4 + Number(m[1]);
}

/** Status codes of every response in a raw answer, in order. */
export function statuses(data: string): number[] {
  return [...data.matchAll(/HTTP\/1\.[01] (\d{3}) /g)].map((m) => Number(m[1]));
}

/** The first response's headers (lower-cased names) and body. */
export function firstResponse(data: string): { status: number; headers: Record<string, string>; body: string } {
  const end = data.indexOf('\r\n\r\n');
  const head = data.slice(0, end).split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of head.slice(1)) {
    const i = line.indexOf(':');
    headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const len = Number(headers['content-length'] ?? data.length);
  return { status, headers, body: data.slice(end + 4, end + 4 + len) };
}
