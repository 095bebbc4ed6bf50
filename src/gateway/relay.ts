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

/** Opens a tunnel stream on the agent and relays the request; resolves with the response head. */
export function relay(openTunnel: OpenTunnel, timeoutMs: number, t: RelayTarget, req: RelayRequest, client: ClientLink | null): Promise<Upstream> {
  return new Promise<Upstream>((resolve, reject) => {
    let headSeen = false;
    let settled = false;
    let reqCredit = TUNNEL_WINDOW;
    const creditWaiters: Array<() => void> = [];
    const q = new ChunkQueue();
    let channel: TunnelChannel | null = null;
    // the timeout runs from the moment the whole request was sent (a long upload is not a slow container)
    let timer: NodeJS.Timeout | undefined;
    const armTimeout = (): void => {
      if (settled && headSeen) return;
      timer = setTimeout(() => {
        channel?.reset('timeout', 'no response head in time');
        fail(new TunnelFailure('timeout', `the container did not answer within ${timeoutMs} ms of the request`, false));
      }, timeoutMs);
    };
    const fail = (e: Error): void => {
      clearTimeout(timer);
      for (const w of creditWaiters.splice(0)) w();
      if (!settled) {
        settled = true;
        reject(e);
      } else q.fail(e);
    };
    const h: TunnelHandlers = {
      head: (head) => {
        if (headSeen) return;
        headSeen = true;
        clearTimeout(timer);
        if (head.end) q.end();
        settled = true;
        resolve({ head, body: head.end ? null : q.iterable((n) => channel?.window(n)), cancel: () => channel?.reset('cancelled', 'the client went away') });
      },
      data: (chunk, end) => {
        if (chunk.length) q.push(chunk);
        if (end) q.end();
      },
      window: (n) => {
        reqCredit += n;
        for (const w of creditWaiters.splice(0)) w();
      },
      ws: () => undefined,
      reset: (code, message) => {
        const before = !headSeen;
        fail(new TunnelFailure(code, `the tunnel to the container failed (${code}): ${message}`, before && (code === 'connect_failed' || code === 'instance_not_found')));
      },
    };
    const inlineBody = Buffer.isBuffer(req.body) ? req.body : null;
    channel = openTunnel(t.agentId, t.teamId, { instanceId: t.instanceId, method: req.method, path: req.path, headers: req.headers, body: inlineBody ?? Buffer.alloc(0), end: inlineBody !== null || req.body === null, websocket: false, window: TUNNEL_WINDOW, timeoutMs }, h);
    if (!channel) {
      fail(new TunnelFailure('agent_unreachable', 'the agent of this instance is not connected to any node', true));
      return;
    }
    const ch = channel;
    if (req.body === null || inlineBody !== null) armTimeout();
    client?.onAbort(() => {
      ch.reset('cancelled', 'the client went away');
      fail(new TunnelFailure('cancelled', 'the client went away', false));
    });
    // a streamed request body: chunks go out under the agent's credit
    if (req.body !== null && inlineBody === null) {
      const src = req.body as AsyncIterable<Buffer>;
      void (async () => {
        try {
          for await (const chunk of src) {
            for (let off = 0; off < chunk.length; ) {
              while (reqCredit <= 0 && !q.failed) await new Promise<void>((r) => creditWaiters.push(r));
              if (q.failed) return;
              const n = Math.min(chunk.length - off, reqCredit, MAX_CHUNK);
              ch.data(chunk.subarray(off, off + n), false);
              reqCredit -= n;
              off += n;
            }
          }
          ch.data(Buffer.alloc(0), true);
          armTimeout();
        } catch (e) {
          ch.reset('cancelled', 'the request body could not be read');
          fail(e instanceof Error ? e : new Error(String(e)));
        }
      })();
    }
  });
}
