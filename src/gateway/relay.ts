/**
 * The tunnel stream client: one proxied request relayed on one tunnel stream of an agent, with the
 * credit windows of both directions (the request body goes out under the agent's credit; the
 * response body's credit goes back as the reader takes it).
 */
import { ChunkQueue } from './chunk-queue.js';
import { INLINE_BODY_MAX, MAX_CHUNK, TUNNEL_WINDOW, type HeaderList, type OpenTunnel, type TunnelChannel, type TunnelHandlers, type TunnelHeadInfo } from './tunnel.js';

/** The request as it goes to the container. */
export interface RelayRequest {
  method: string;
  path: string;
  headers: HeaderList;
  body: AsyncIterable<Buffer> | Buffer | null;
}

/** What a relayed exchange produced, before it is written to the client. */
export interface Upstream {
  head: TunnelHeadInfo;
  /** The rest of the body (absent when head.end). */
  body: AsyncIterable<Buffer> | null;
  cancel(): void;
}

/** The client of an exchange, as far as the gateway cares: it may go away. */
export interface ClientLink {
  /** Runs `h` when the client goes away (at once if it already has). */
  onAbort(h: () => void): void;
}

/** Where a stream goes: the agent, its team, and the instance ('' = the agent's own tunnel target). */
export interface RelayTarget {
  agentId: string;
  teamId: string;
  instanceId: string;
}

export class TunnelFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
    /** The request never reached the container: another instance may take it. */
    readonly retryable: boolean,
  ) {
    super(message);
  }
}

/**
 * A small body (Content-Length up to INLINE_BODY_MAX) is read whole: it travels in the open frame
 * and can be replayed on another instance. Null for a larger or chunked body (streamed once).
 */
export async function inlineBody(body: AsyncIterable<Buffer> | Buffer | null, headers: HeaderList): Promise<Buffer | null> {
  if (body === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  const declared = headers.find(([k]) => k.toLowerCase() === 'content-length')?.[1];
  if (declared === undefined || !/^\d+$/.test(declared) || Number(declared) > INLINE_BODY_MAX) return null;
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c);
  return Buffer.concat(chunks);
}

/** The whole response body of an exchange: the bytes that came in the head frame, then the rest. */
export async function* bodyOf(up: Upstream): AsyncIterable<Buffer> {
  if (up.head.body.length) yield up.head.body;
  if (up.body) yield* up.body;
}

/** Counts a stream's end (or abandonment) once. */
export async function* released(src: AsyncIterable<Buffer>, done: () => void): AsyncIterable<Buffer> {
  try {
    yield* src;
  } finally {
    done();
  }
}

/**
 * One relayed exchange: the stream's handlers (the agent's frames) and its state. A class rather
 * than closures: a proxied request allocates one object, not a dozen functions.
 */
class Exchange implements TunnelHandlers {
  private headSeen = false;
  private settled = false;
  /** fail() came after the head was handed out (the body reader hears it). */
  private failedLate = false;
  private reqCredit = TUNNEL_WINDOW;
  private creditWaiters: Array<() => void> | null = null;
  /** The response body's chunks: only for a response whose body did not come whole in the head. */
  private q: ChunkQueue | null = null;
  channel: TunnelChannel | null = null;
  // the timeout runs from the moment the whole request was sent (a long upload is not a slow container)
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly timeoutMs: number,
    private readonly resolve: (u: Upstream) => void,
    private readonly reject: (e: Error) => void,
  ) {}

  armTimeout(): void {
    if (this.settled && this.headSeen) return;
    this.timer = setTimeout(() => this.onTimeout(), this.timeoutMs);
  }

  private onTimeout(): void {
    this.channel?.reset('timeout', 'no response head in time');
    this.fail(new TunnelFailure('timeout', `the container did not answer within ${this.timeoutMs} ms of the request`, false));
  }

  fail(e: Error): void {
    clearTimeout(this.timer);
    this.wakeCredit();
    if (!this.settled) {
      this.settled = true;
      this.reject(e);
    } else {
      this.failedLate = true;
      (this.q ??= new ChunkQueue()).fail(e);
    }
  }

  private wakeCredit(): void {
    const ws = this.creditWaiters;
    if (!ws) return;
    this.creditWaiters = null;
    for (const w of ws) w();
  }

  head(head: TunnelHeadInfo): void {
    if (this.headSeen) return;
    this.headSeen = true;
    clearTimeout(this.timer);
    this.settled = true;
    if (head.end) {
      this.resolve({ head, body: null, cancel: () => this.channel?.reset('cancelled', 'the client went away') });
      return;
    }
    const q = (this.q ??= new ChunkQueue());
    this.resolve({ head, body: q.iterable((n) => this.channel?.window(n)), cancel: () => this.channel?.reset('cancelled', 'the client went away') });
  }

  data(chunk: Buffer, end: boolean): void {
    const q = (this.q ??= new ChunkQueue());
    if (chunk.length) q.push(chunk);
    if (end) q.end();
  }

  window(n: number): void {
    this.reqCredit += n;
    this.wakeCredit();
  }

  ws(): void {
    return undefined;
  }

  reset(code: string, message: string): void {
    const before = !this.headSeen;
    this.fail(new TunnelFailure(code, `the tunnel to the container failed (${code}): ${message}`, before && (code === 'connect_failed' || code === 'instance_not_found')));
  }

  /** A streamed request body: chunks go out under the agent's credit. */
  async pumpBody(ch: TunnelChannel, src: AsyncIterable<Buffer>): Promise<void> {
    try {
      for await (const chunk of src) {
        for (let off = 0; off < chunk.length; ) {
          while (this.reqCredit <= 0 && !this.failedLate) await new Promise<void>((r) => (this.creditWaiters ??= []).push(r));
          if (this.failedLate) return;
          const n = Math.min(chunk.length - off, this.reqCredit, MAX_CHUNK);
          ch.data(chunk.subarray(off, off + n), false);
          this.reqCredit -= n;
          off += n;
        }
      }
      ch.data(EMPTY, true);
      this.armTimeout();
    } catch (e) {
      ch.reset('cancelled', 'the request body could not be read');
      this.fail(e instanceof Error ? e : new Error(String(e)));
    }
  }
}

const EMPTY = Buffer.alloc(0);

/** Opens a tunnel stream on the agent and relays the request; resolves with the response head. */
export function relay(openTunnel: OpenTunnel, timeoutMs: number, t: RelayTarget, req: RelayRequest, client: ClientLink | null): Promise<Upstream> {
  return new Promise<Upstream>((resolve, reject) => {
    const x = new Exchange(timeoutMs, resolve, reject);
    const inlineBody = Buffer.isBuffer(req.body) ? req.body : null;
    const ch = openTunnel(t.agentId, t.teamId, { instanceId: t.instanceId, method: req.method, path: req.path, headers: req.headers, body: inlineBody ?? EMPTY, end: inlineBody !== null || req.body === null, websocket: false, window: TUNNEL_WINDOW, timeoutMs }, x);
    x.channel = ch;
    if (!ch) {
      x.fail(new TunnelFailure('agent_unreachable', 'the agent of this instance is not connected to any node', true));
      return;
    }
    if (req.body === null || inlineBody !== null) x.armTimeout();
    client?.onAbort(() => {
      ch.reset('cancelled', 'the client went away');
      x.fail(new TunnelFailure('cancelled', 'the client went away', false));
    });
    if (req.body !== null && inlineBody === null) void x.pumpBody(ch, req.body as AsyncIterable<Buffer>);
  });
}
