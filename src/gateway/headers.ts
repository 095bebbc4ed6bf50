/**
 * The gateway's header rules: what the container gets from the client's request and what comes
 * back from the container's response.
 */
import type { HeaderList } from './tunnel.js';

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the gateway owns: never relayed to the container. */
export const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'host', 'proxy-authenticate', 'proxy-authorization']);
/** Also not forwarded by the transparent proxy: Gantry's own credential and team header. */
const GANTRY_OWN = new Set(['authorization', 'x-team-id', 'x-request-id']);
/** Not relayed back: framing (uWS writes its own) and the date (uWS writes its own). */
export const RESPONSE_OWN = new Set([...HOP, 'content-length', 'date']);

/** The client side of a proxied request, as the HTTP face decoded it. */
export interface ClientRequestInfo {
  ip: string;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  /** The full request path (with the base path). */
  path: string;
}

/** The prefix pattern per base path (compiled once, not per request). */
const prefixPatterns = new Map<string, RegExp>();
function prefixPattern(basePath: string): RegExp {
  let re = prefixPatterns.get(basePath);
  if (!re) {
    re = new RegExp(`^(${basePath}/(?:r/containers/[^/]+|agents/[^/]+/tunnel))`);
    prefixPatterns.set(basePath, re);
  }
  return re;
}

/** Request headers the container gets: the client's, minus hop-by-hop and Gantry's own, plus X-Forwarded-*. */
export function forwardHeaders(h: Record<string, string>, c: ClientRequestInfo, basePath: string): HeaderList {
  // headers named by Connection are hop-by-hop too (rare: most clients send keep-alive or close)
  const conn = h.connection;
  const connTokens = conn ? new Set(conn.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean)) : null;
  const out: HeaderList = [];
  for (const k in h) {
    if (HOP.has(k) || GANTRY_OWN.has(k) || connTokens?.has(k) || k.startsWith('x-forwarded-')) continue;
    out.push([k, h[k] as string]);
  }
  const prior = h['x-forwarded-for'];
  out.push(['x-forwarded-for', prior ? `${prior}, ${c.ip}` : c.ip]);
  out.push(['x-forwarded-proto', h['x-forwarded-proto'] ?? 'http']);
  if (h.host) out.push(['x-forwarded-host', h['x-forwarded-host'] ?? h.host]);
  const m = prefixPattern(basePath).exec(c.path);
  if (m?.[1]) out.push(['x-forwarded-prefix', m[1]]);
  return out;
}

export const firstOf = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);
