/**
 * Streaming egress to an external container service (service_type external): the request goes to
 * the service's external_url joined with the path after the slug, with the team's vault header
 * injected.
 *
 * - The URL: baseUrl (https only, no userinfo) keeps its own path prefix; `path` must start with a
 *   single '/' and may not leave the prefix (dot segments, encoded or not) nor change scheme or
 *   host (`//evil`, `http://...`, backslashes are refused).
 * - Every connection goes through the OutboundGuard: the URL is checked, and the socket's lookup is
 *   the guard's, so it connects only to addresses that were checked (no DNS-rebinding window). TLS
 *   is verified. Connections are kept alive, one https.Agent per (guard, origin, CA list).
 * - Redirects (301, 302, 303, 307, 308 with a Location) are followed up to maxRedirects (default
 *   5), each hop checked by the guard. The injected credential goes only to baseUrl's origin
 *   (dropped, with Authorization and Cookie, once a hop leaves it; never restored). 303, and 301/302
 *   of a POST, continue as GET without a body; 307/308 keep method and body, except that a streamed
 *   body cannot be replayed: then the 3xx is returned as is. Past maxRedirects the last 3xx is
 *   returned as is.
 * - The response body is a stream (never buffered). Failures before the response headers throw an
 *   ExternalError: `refused` (the guard, or a URL that is not allowed), `timeout` (no response
 *   headers within timeoutMs, across all hops), `connect` (DNS, TCP, TLS or a reset), `aborted`
 *   (the signal), `invalid_request` (a header Node cannot send). The gateway maps them to 502
 *   (invalid_request: 400).
 */
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import net from 'node:net';
import { Readable, pipeline } from 'node:stream';
import { OutboundRefused, type OutboundGuard } from '../events/outbound.js';

export interface ExternalRequest {
  /** The service's external_url (https only). */
  baseUrl: string;
  /** The path after the slug incl. query; starts with '/'. */
  path: string;
  method: string;
  /** Already stripped of hop-by-hop headers by the caller. */
  headers: Record<string, string>;
  body: AsyncIterable<Buffer> | Buffer | null;
  /** The vault header. */
  inject?: { name: string; value: string } | null;
  /** Until the response headers (all redirect hops together). */
  timeoutMs: number;
  /** Default 5. */
  maxRedirects?: number;
  ca?: string[];
  signal?: AbortSignal;
}

export interface ExternalResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: NodeJS.ReadableStream;
}

export type ExternalErrorCode = 'refused' | 'timeout' | 'connect' | 'aborted' | 'invalid_request';

export class ExternalError extends Error {
  constructor(
    readonly code: ExternalErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ExternalError';
  }
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
/** Never forwarded from the caller: the connection and framing are ours. */
const HOP_BY_HOP = new Set(['host', 'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-authenticate', 'proxy-authorization']);
/** Dropped when a redirect leaves the service's origin (as browsers do). */
const ORIGIN_BOUND = new Set(['authorization', 'cookie']);
/** Dropped when a redirect turns the request into a body-less GET. */
const BODY_HEADERS = new Set(['content-length', 'content-type', 'content-encoding', 'content-language', 'content-location', 'transfer-encoding']);

// ------------------------------------------------------------------------------------------
// the URL

function parseBase(baseUrl: string): URL {
  let u: URL;
  try {
    u = new URL(baseUrl);
  } catch {
    throw new ExternalError('refused', 'external_url is not a valid absolute URL');
  }
  if (u.protocol !== 'https:') throw new ExternalError('refused', `external_url scheme ${u.protocol} is not allowed (https: only)`);
  if (u.username || u.password) throw new ExternalError('refused', 'credentials in external_url are not allowed');
  return u;
}

/** baseUrl joined with path; refuses a path that would change scheme or host or leave the base path prefix. */
export function joinExternalUrl(baseUrl: string, path: string): URL {
  const base = parseBase(baseUrl);
  if (typeof path !== 'string' || !path.startsWith('/') || path.startsWith('//')) throw new ExternalError('refused', 'path must start with a single "/" (absolute and protocol-relative URLs are refused)');
  if (/[\\\x00-\x20\x7f]/.test(path)) throw new ExternalError('refused', 'path must not contain backslashes, spaces or control characters');
  const hash = path.indexOf('#');
  const p = hash >= 0 ? path.slice(0, hash) : path;
  const qAt = p.indexOf('?');
  const pathname = qAt >= 0 ? p.slice(0, qAt) : p;
  const query = qAt >= 0 ? p.slice(qAt + 1) : '';
  const prefix = base.pathname.replace(/\/+$/, '');
  const search = [base.search.replace(/^\?/, ''), query].filter(Boolean).join('&');
  let u: URL;
  try {
    u = new URL(`${base.origin}${prefix}${pathname}${search ? `?${search}` : ''}`);
  } catch {
    throw new ExternalError('refused', 'path does not form a valid URL');
  }
  if (u.origin !== base.origin) throw new ExternalError('refused', 'path must not change the scheme or host');
  // dot segments (also %2e) are resolved by the parser: the result must stay under the prefix
  if (prefix && u.pathname !== prefix && !u.pathname.startsWith(`${prefix}/`)) throw new ExternalError('refused', 'path must not leave the base path of external_url');
  return u;
}

// ------------------------------------------------------------------------------------------
// keep-alive agents: one per (guard, origin, CA list), every socket through the guard's lookup

const agentsByGuard = new WeakMap<OutboundGuard, Map<string, https.Agent>>();
const caIds = new WeakMap<string[], number>();
let nextCaId = 1;

function caKey(ca: string[] | undefined): string {
  if (!ca) return '-';
  let id = caIds.get(ca);
  if (id === undefined) {
    id = nextCaId++;
    caIds.set(ca, id);
  }
  return String(id);
}

function agentFor(guard: OutboundGuard, origin: string, ca: string[] | undefined): https.Agent {
  let m = agentsByGuard.get(guard);
  if (!m) {
    m = new Map();
    agentsByGuard.set(guard, m);
  }
  const key = `${origin}|${caKey(ca)}`;
  let a = m.get(key);
  if (!a) {
    a = new https.Agent({
      keepAlive: true,
      keepAliveMsecs: 15_000,
      maxSockets: 256,
      maxFreeSockets: 32,
      // an idle pooled socket closes after this (a busy one is not affected)
      timeout: 30_000,
      scheduling: 'lifo',
      lookup: guard.lookup as never,
      rejectUnauthorized: true,
      ...(ca ? { ca } : {}),
    });
    m.set(key, a);
  }
  return a;
}

/** Closes the pooled connections made for a guard (shutdown, tests). */
export function closeExternalAgents(guard: OutboundGuard): void {
  const m = agentsByGuard.get(guard);
  if (!m) return;
  for (const a of m.values()) a.destroy();
  agentsByGuard.delete(guard);
}

// ------------------------------------------------------------------------------------------
// one hop

interface Hop {
  url: URL;
  method: string;
  headers: Record<string, string>;
  body: AsyncIterable<Buffer> | Buffer | null;
}

const hostOf = (u: URL): string => u.hostname.replace(/^\[|\]$/g, '');

function send(guard: OutboundGuard, h: Hop, r: ExternalRequest, deadline: number): Promise<IncomingMessage> {
  return new Promise<IncomingMessage>((resolve, reject) => {
    let settled = false;
    let req: ReturnType<typeof https.request> | null = null;
    const finish = (e: Error | null, res?: IncomingMessage): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      r.signal?.removeEventListener('abort', onAbort);
      if (e) reject(e);
      else resolve(res as IncomingMessage);
    };
    const remaining = Math.max(0, deadline - Date.now());
    const timer = setTimeout(() => {
      const e = new ExternalError('timeout', `no response from ${h.url.origin} within ${r.timeoutMs} ms`);
      req?.destroy(e);
      finish(e);
    }, remaining);
    const onAbort = (): void => {
      const e = new ExternalError('aborted', 'the request was aborted');
      req?.destroy(e);
      finish(e);
    };
    if (r.signal?.aborted) return onAbort();
    r.signal?.addEventListener('abort', onAbort, { once: true });

    const host = hostOf(h.url);
    const headers: Record<string, string> = { ...h.headers };
    if (Buffer.isBuffer(h.body)) headers['content-length'] = String(h.body.length);
    else if (h.body === null) delete headers['content-length'];
    try {
      req = https.request({
        protocol: 'https:',
        hostname: host,
        port: h.url.port || 443,
        path: `${h.url.pathname}${h.url.search}`,
        method: h.method,
        headers,
        servername: net.isIP(host) ? undefined : host,
        lookup: guard.lookup as never,
        agent: agentFor(guard, h.url.origin, r.ca),
        rejectUnauthorized: true,
        ...(r.ca ? { ca: r.ca } : {}),
      });
    } catch (e) {
      // ERR_INVALID_CHAR / ERR_INVALID_HTTP_TOKEN: a header that cannot be sent (never echo its value)
      const code = (e as NodeJS.ErrnoException).code ?? 'invalid';
      return finish(new ExternalError('invalid_request', `the request has a header that cannot be sent (${code})`));
    }
    const sent = req;
    sent.on('response', (res) => finish(null, res));
    sent.on('error', (e: NodeJS.ErrnoException) => {
      if (e instanceof ExternalError) return finish(e);
      if (e.code === 'EOUTBOUNDREFUSED') return finish(new ExternalError('refused', e.message, { cause: e }));
      const err = new ExternalError('connect', `cannot reach ${h.url.origin}: ${e.code ?? e.message}`, { cause: e });
      (err as ExternalError & { reused?: boolean }).reused = sent.reusedSocket;
      finish(err);
    });
    if (h.body === null) sent.end();
    else if (Buffer.isBuffer(h.body)) sent.end(h.body);
    else {
      const src = Readable.from(h.body);
      pipeline(src, sent, (e) => {
        // the request's own error is reported by its 'error' handler; a failing body source ends it
        if (e && !sent.destroyed) sent.destroy(e);
      });
    }
  });
}

// ------------------------------------------------------------------------------------------
// the request

const lower = (headers: Record<string, string>): Record<string, string> => {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) {
    const n = k.toLowerCase();
    if (HOP_BY_HOP.has(n)) continue;
    out[n] = v;
  }
  return out;
};

/**
 * The guard's check of one hop: https only, no userinfo; an IP literal is checked here (Node never
 * calls `lookup` for one); a host name is resolved and checked by the guard's lookup when a
 * connection is made (a pooled connection was checked when it was made), so the socket connects to
 * exactly the addresses that were checked, with one DNS resolution per connection.
 */
export async function checkHop(guard: OutboundGuard, u: URL): Promise<void> {
  if (u.protocol !== 'https:') throw new ExternalError('refused', `redirect to scheme ${u.protocol} refused (https: only)`);
  if (u.username || u.password) throw new ExternalError('refused', 'credentials in the URL are not allowed');
  const host = hostOf(u);
  if (!net.isIP(host)) return;
  try {
    await guard.resolve(host);
  } catch (e) {
    if (e instanceof OutboundRefused) throw new ExternalError('refused', e.message, { cause: e });
    throw e;
  }
}

function responseHeaders(res: IncomingMessage): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  // repeated fields stay separate (Node would join unknown ones with ', ')
  for (const [k, v] of Object.entries(res.headersDistinct)) if (v !== undefined) out[k] = v.length === 1 ? (v[0] as string) : v;
  return out;
}

/** One external request: guarded connections, the vault header on the service's origin only, redirects followed, the body streamed. */
export async function externalRequest(guard: OutboundGuard, r: ExternalRequest): Promise<ExternalResponse> {
  const deadline = Date.now() + r.timeoutMs;
  const first = joinExternalUrl(r.baseUrl, r.path);
  const origin = first.origin;
  const maxRedirects = r.maxRedirects ?? 5;
  const inject = r.inject ?? null;
  let hop: Hop = { url: first, method: r.method.toUpperCase(), headers: lower(r.headers), body: r.body };
  let left = true; // still on the service's origin
  for (let redirects = 0; ; redirects++) {
    left &&= hop.url.origin === origin;
    const headers = { ...hop.headers };
    if (!left) for (const n of ORIGIN_BOUND) delete headers[n];
    if (inject) {
      // the caller cannot send its own value under the vault header's name
      delete headers[inject.name.toLowerCase()];
      if (left) headers[inject.name.toLowerCase()] = inject.value;
    }
    await checkHop(guard, hop.url);
    let res: IncomingMessage;
    try {
      res = await send(guard, { ...hop, headers }, r, deadline);
    } catch (e) {
      // a pooled connection the server had closed: one retry when the body can be sent again
      const replayable = hop.body === null || Buffer.isBuffer(hop.body);
      if (e instanceof ExternalError && e.code === 'connect' && (e as ExternalError & { reused?: boolean }).reused && replayable) res = await send(guard, { ...hop, headers }, r, deadline);
      else throw e;
    }
    const status = res.statusCode ?? 0;
    const location = res.headers.location;
    if (!REDIRECTS.has(status) || !location || redirects >= maxRedirects) return wrap(res, r.signal);
    let next: URL;
    try {
      next = new URL(location, hop.url);
    } catch {
      return wrap(res, r.signal);
    }
    const toGet = status === 303 ? hop.method !== 'HEAD' : (status === 301 || status === 302) && hop.method === 'POST';
    if (!toGet && hop.body !== null && !Buffer.isBuffer(hop.body)) return wrap(res, r.signal); // a streamed body cannot be replayed
    // the redirect's own body is discarded (the socket goes back to the pool)
    res.resume();
    const nextHeaders = { ...hop.headers };
    if (toGet) for (const n of BODY_HEADERS) delete nextHeaders[n];
    hop = { url: next, method: toGet ? 'GET' : hop.method, headers: nextHeaders, body: toGet ? null : hop.body };
  }
}

function wrap(res: IncomingMessage, signal: AbortSignal | undefined): ExternalResponse {
  if (signal) {
    const onAbort = (): void => {
      res.destroy(new ExternalError('aborted', 'the request was aborted'));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    res.once('close', () => signal.removeEventListener('abort', onAbort));
  }
  return { status: res.statusCode ?? 0, headers: responseHeaders(res), body: res };
}
