import http from 'node:http';
import https from 'node:https';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { GantryNode } from '../../src/main.js';
import { submitTask } from '../helpers/tasks.js';

export interface SseMessage {
  id: string | undefined;
  event: string;
  data: any;
}

/**
 * A real SSE client over raw HTTP (node:http): sends Authorization/X-Team-ID/Last-Event-ID, parses
 * the text/event-stream framing (id/event/data lines, comments), and knows when the server closed.
 */
export class SseClient {
  messages: SseMessage[] = [];
  comments: string[] = [];
  ended = false;
  status = 0;
  headers: http.IncomingHttpHeaders = {};
  body = '';
  private buf = '';
  private waiters: Array<() => void> = [];
  private req: http.ClientRequest | null = null;
  private res: http.IncomingMessage | null = null;
  readonly closed: Promise<void>;
  private closedResolve!: () => void;

  private constructor() {
    this.closed = new Promise((r) => (this.closedResolve = r));
  }

  static connect(url: string, headers: Record<string, string>): Promise<SseClient> {
    const c = new SseClient();
    return new Promise((resolve, reject) => {
      const req = http.get(url, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
        c.res = res;
        c.status = res.statusCode ?? 0;
        c.headers = res.headers;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => c.feed(chunk));
        const done = (): void => {
          if (c.ended) return;
          c.ended = true;
          c.notify();
          c.closedResolve();
        };
        res.on('end', done);
        res.on('close', done);
        res.on('error', done);
        resolve(c);
      });
      c.req = req;
      req.on('error', (e) => {
        if (c.status === 0) reject(e);
        else {
          c.ended = true;
          c.notify();
          c.closedResolve();
        }
      });
    });
  }

  private feed(chunk: string): void {
    this.body += chunk;
    if (this.status !== 200) return this.notify();
    this.buf += chunk;
    let i: number;
    while ((i = this.buf.indexOf('\n\n')) >= 0) {
      const block = this.buf.slice(0, i);
      this.buf = this.buf.slice(i + 2);
      let id: string | undefined;
      let event = 'message';
      const data: string[] = [];
      let any = false;
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) {
          this.comments.push(line.slice(1).trim());
          continue;
        }
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        const value = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
        if (field === 'id') id = value;
        else if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
        else continue;
        any = true;
      }
      if (any && data.length) this.messages.push({ id, event, data: JSON.parse(data.join('\n')) });
    }
    this.notify();
  }

  private notify(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Waits until pred holds (checked on every chunk). */
  async until(pred: (c: SseClient) => boolean, timeoutMs = 10_000, what = 'condition'): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pred(this)) {
      if (Date.now() > deadline) throw new Error(`sse: ${what} not met in ${timeoutMs} ms; got ${JSON.stringify(this.messages.map((m) => [m.id, m.event, m.data.status ?? m.data.progress]))} ended=${this.ended}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, 50);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  /** Drops the connection from the client side. */
  close(): void {
    this.res?.destroy();
    this.req?.destroy();
  }
}

export const label = (m: SseMessage): string => (m.event === 'status' ? m.data.status : m.event);

/** Inserts a pending task like the run endpoint (optionally "run by" a user), then tells the scheduler. */
export function submitAs(node: GantryNode, teamId: string, userId: string | null, o: { maxRetries?: number } = {}): Promise<string> {
  return submitTask(node, teamId, { ...o, createdByUserId: userId, workflowSlug: 'events-wf' });
}

// ------------------------------------------------------------------------------------------
// an HTTPS webhook receiver with its own CA

export interface Pki {
  dir: string;
  caFile: string;
  key: Buffer;
  cert: Buffer;
  cleanup(): void;
}

/** A throwaway CA and a server certificate for localhost/127.0.0.1/::1 (openssl). */
export function makePki(): Pki {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-pki-'));
  const run = (args: string[]): void => {
    execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  };
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=Gantry Test CA']);
  run(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'srv.key', '-out', 'srv.csr', '-subj', '/CN=localhost']);
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n');
  run(['x509', '-req', '-in', 'srv.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'srv.pem', '-days', '2', '-extfile', 'ext.cnf']);
  return {
    dir,
    caFile: join(dir, 'ca.pem'),
    key: readFileSync(join(dir, 'srv.key')),
    cert: readFileSync(join(dir, 'srv.pem')),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface Received {
  headers: http.IncomingHttpHeaders;
  body: string;
  at: number;
  status: number;
}

export class Receiver {
  received: Received[] = [];
  /** Decides the status of the n-th request (0-based). */
  respond: (n: number) => number = () => 200;
  url = '';
  private server: https.Server;
  private waiters: Array<() => void> = [];

  constructor(
    pki: Pki,
    private readonly now: () => number,
  ) {
    this.server = https.createServer({ key: pki.key, cert: pki.cert }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const status = this.respond(this.received.length);
        this.received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: this.now(), status });
        res.writeHead(status, { 'content-type': 'text/plain' });
        res.end(status < 300 ? 'ok' : 'nope');
        for (const w of this.waiters.splice(0)) w();
      });
    });
  }

  async start(host = 'localhost'): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `https://${host}:${(this.server.address() as AddressInfo).port}/hook`;
    return this;
  }

  async waitFor(n: number, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.received.length < n) {
      if (Date.now() > deadline) throw new Error(`receiver: ${this.received.length} of ${n} requests after ${timeoutMs} ms`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, 50);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
