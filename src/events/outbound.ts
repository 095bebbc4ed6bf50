/**
 * Outbound safety for every call Gantry makes to a URL a tenant chose (webhooks now, external
 * container services later): the host is resolved (all addresses) and refused when any address is
 * loopback, private, CGNAT, link-local (incl. the 169.254.169.254 metadata service), unique-local,
 * multicast, reserved, or an IPv4-mapped/translated form of those, unless the host or the address
 * is listed in GANTRY_OUTBOUND_ALLOWLIST (comma-separated host names, IPs or CIDRs).
 *
 * The check is made at create/update time (checkUrl) and again on every connection: the request's
 * `lookup` is replaced by guard.lookup, so the socket connects to exactly the address that was
 * checked (no DNS-rebinding window). Redirects are never followed. TLS verification stays on; extra
 * CAs come from NODE_EXTRA_CA_CERTS (Node's default store) or GANTRY_OUTBOUND_CA_FILE.
 */
import { lookup as dnsLookup } from 'node:dns';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';

export type Family = 4 | 6;

interface Cidr {
  family: Family;
  bits: bigint;
  prefix: number;
}

export interface ResolvedAddress {
  address: string;
  family: Family;
}

export type Resolver = (host: string) => Promise<ResolvedAddress[]>;

export class OutboundRefused extends Error {
  constructor(
    readonly reason: 'scheme' | 'blocked_address' | 'unresolvable' | 'invalid_url',
    message: string,
  ) {
    super(message);
    this.name = 'OutboundRefused';
  }
}

// ------------------------------------------------------------------------------------------
// address arithmetic

/** Parses an IPv4 or IPv6 literal (no brackets) to its integer value; null when not an IP. */
export function parseIp(addr: string): { family: Family; bits: bigint } | null {
  const a = addr.replace(/%.*$/, '');
  const fam = net.isIP(a);
  if (fam === 4) {
    let v = 0n;
    for (const part of a.split('.')) v = (v << 8n) | BigInt(Number(part));
    return { family: 4, bits: v };
  }
  if (fam !== 6) return null;
  let s = a.toLowerCase();
  // dotted IPv4 tail (::ffff:1.2.3.4)
  const m = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (m && m[1] !== undefined && m[2] !== undefined) {
    const v4 = parseIp(m[2]);
    if (!v4) return null;
    const hi = Number(v4.bits >> 16n).toString(16);
    const lo = Number(v4.bits & 0xffffn).toString(16);
    s = `${m[1]}${hi}:${lo}`;
  }
  const [head = '', tail] = s.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail !== undefined && tail !== '' ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  if (groups.length !== 8) return null;
  let v = 0n;
  for (const g of groups) v = (v << 16n) | BigInt(parseInt(g || '0', 16));
  return { family: 6, bits: v };
}

function parseCidr(s: string): Cidr | null {
  const [ip = '', pfx] = s.split('/');
  const p = parseIp(ip.replace(/^\[|\]$/g, ''));
  if (!p) return null;
  const max = p.family === 4 ? 32 : 128;
  const prefix = pfx === undefined ? max : Number(pfx);
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max) return null;
  return { family: p.family, bits: p.bits, prefix };
}

function inCidr(ip: { family: Family; bits: bigint }, c: Cidr): boolean {
  if (ip.family !== c.family) return false;
  const width = BigInt(c.family === 4 ? 32 : 128);
  const shift = width - BigInt(c.prefix);
  return ip.bits >> shift === c.bits >> shift;
}

const cidrs = (list: string[]): Cidr[] => list.map((s) => parseCidr(s) as Cidr);

const BLOCKED_V4 = cidrs([
  '0.0.0.0/8', // "this network"
  '10.0.0.0/8', // private
  '100.64.0.0/10', // CGNAT
  '127.0.0.0/8', // loopback
  '169.254.0.0/16', // link-local, cloud metadata (169.254.169.254)
  '172.16.0.0/12', // private
  '192.0.0.0/24', // IETF protocol assignments
  '192.0.2.0/24', // TEST-NET-1
  '192.88.99.0/24', // 6to4 relay anycast
  '192.168.0.0/16', // private
  '198.18.0.0/15', // benchmarking
  '198.51.100.0/24', // TEST-NET-2
  '203.0.113.0/24', // TEST-NET-3
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, broadcast
]);

const BLOCKED_V6 = cidrs([
  '::/96', // unspecified, loopback (::1), IPv4-compatible
  '100::/64', // discard
  '2001:db8::/32', // documentation
  'fc00::/7', // unique local
  'fe80::/10', // link-local
  'fec0::/10', // site-local (deprecated)
  'ff00::/8', // multicast
]);

/** IPv6 forms that embed an IPv4 address: mapped (::ffff:0:0/96), NAT64 (64:ff9b::/96), 6to4 (2002::/16). */
function embeddedV4(ip: { family: Family; bits: bigint }): { family: Family; bits: bigint } | null {
  if (ip.family !== 6) return null;
  const mapped = parseCidr('::ffff:0:0/96') as Cidr;
  const nat64 = parseCidr('64:ff9b::/96') as Cidr;
  if (inCidr(ip, mapped) || inCidr(ip, nat64)) return { family: 4, bits: ip.bits & 0xffffffffn };
  const sixToFour = parseCidr('2002::/16') as Cidr;
  if (inCidr(ip, sixToFour)) return { family: 4, bits: (ip.bits >> 80n) & 0xffffffffn };
  return null;
}

/** Why an address is refused (null: a public unicast address). Ignores the allowlist. */
export function blockedReason(address: string): string | null {
  const ip = parseIp(address);
  if (!ip) return 'not an IP address';
  if (ip.family === 4) return BLOCKED_V4.some((c) => inCidr(ip, c)) ? 'private, loopback, link-local or reserved IPv4 address' : null;
  const v4 = embeddedV4(ip);
  if (v4) {
    // an IPv4-mapped address is never a legitimate public webhook target
    if (inCidr(ip, parseCidr('::ffff:0:0/96') as Cidr)) return 'IPv4-mapped IPv6 address';
    return BLOCKED_V4.some((c) => inCidr(v4, c)) ? 'IPv6 address embedding a private IPv4 address' : null;
  }
  return BLOCKED_V6.some((c) => inCidr(ip, c)) ? 'loopback, link-local, unique-local, multicast or reserved IPv6 address' : null;
}

// ------------------------------------------------------------------------------------------
// the guard

export const defaultResolver: Resolver = (host) =>
  new Promise((resolve, reject) => {
    dnsLookup(host, { all: true, verbatim: true }, (err, addrs) => {
      if (err) reject(err);
      else resolve(addrs.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 })));
    });
  });

export interface OutboundGuardOptions {
  /** GANTRY_OUTBOUND_ALLOWLIST: comma-separated host names, IPs or CIDRs. */
  allowlist?: string | undefined;
  resolver?: Resolver;
}

type LookupCb = (err: NodeJS.ErrnoException | null, address: string | Array<{ address: string; family: number }>, family?: number) => void;

export class OutboundGuard {
  private readonly hosts = new Set<string>();
  private readonly nets: Cidr[] = [];
  private readonly resolver: Resolver;

  constructor(o: OutboundGuardOptions = {}) {
    this.resolver = o.resolver ?? defaultResolver;
    for (const raw of (o.allowlist ?? '').split(',')) {
      const e = raw.trim().toLowerCase();
      if (!e) continue;
      const c = parseCidr(e);
      if (c) this.nets.push(c);
      else this.hosts.add(e.replace(/\.$/, ''));
    }
  }

  private hostAllowlisted(host: string): boolean {
    return this.hosts.has(host.toLowerCase().replace(/\.$/, ''));
  }

  private addressAllowlisted(address: string): boolean {
    const ip = parseIp(address);
    if (!ip) return false;
    const v4 = embeddedV4(ip);
    return this.nets.some((c) => inCidr(ip, c) || (v4 !== null && inCidr(v4, c)));
  }

  /** Null when the address may be connected to for this host, else the reason. */
  refusal(host: string, address: string): string | null {
    if (this.hostAllowlisted(host) || this.addressAllowlisted(address)) return null;
    return blockedReason(address);
  }

  /** Resolves a host (or takes the IP literal) and returns the addresses, all checked. */
  async resolve(host: string): Promise<ResolvedAddress[]> {
    const bare = host.replace(/^\[|\]$/g, '');
    let addrs: ResolvedAddress[];
    if (net.isIP(bare)) addrs = [{ address: bare, family: net.isIP(bare) === 6 ? 6 : 4 }];
    else {
      try {
        addrs = await this.resolver(bare);
      } catch (e) {
        throw new OutboundRefused('unresolvable', `host ${bare} does not resolve (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
      }
      if (addrs.length === 0) throw new OutboundRefused('unresolvable', `host ${bare} does not resolve`);
    }
    for (const a of addrs) {
      const why = this.refusal(bare, a.address);
      if (why) throw new OutboundRefused('blocked_address', `${bare} resolves to ${a.address} (${why}); add it to GANTRY_OUTBOUND_ALLOWLIST to allow it`);
    }
    return addrs;
  }

  /** Checks an https:// URL (scheme, host, every resolved address). */
  async checkUrl(url: string, schemes: readonly string[] = ['https:']): Promise<ResolvedAddress[]> {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new OutboundRefused('invalid_url', 'not a valid absolute URL');
    }
    if (!schemes.includes(u.protocol)) throw new OutboundRefused('scheme', `scheme ${u.protocol} is not allowed (${schemes.join(', ')} only)`);
    if (u.username || u.password) throw new OutboundRefused('invalid_url', 'credentials in the URL are not allowed');
    return this.resolve(u.hostname);
  }

  /**
   * A drop-in `lookup` for net/tls/http(s): resolves, refuses blocked addresses, and hands the
   * socket the checked addresses only (the connection is pinned to what was checked).
   */
  readonly lookup = (hostname: string, options: unknown, cb: LookupCb): void => {
    const all = typeof options === 'object' && options !== null && (options as { all?: boolean }).all === true;
    this.resolve(hostname).then(
      (addrs) => {
        if (all) cb(null, addrs.map((a) => ({ address: a.address, family: a.family })));
        else cb(null, addrs[0]?.address ?? '', addrs[0]?.family ?? 4);
      },
      (e: Error) => {
        const err = Object.assign(new Error(e.message), { code: 'EOUTBOUNDREFUSED' }) as NodeJS.ErrnoException;
        cb(err, all ? [] : '', 4);
      },
    );
  };
}

// ------------------------------------------------------------------------------------------
// the request

/** The CA list for outbound TLS: undefined (Node's default store incl. NODE_EXTRA_CA_CERTS) unless a CA file is configured. */
export function outboundCa(caFile: string | undefined): string[] | undefined {
  if (!caFile) return undefined;
  const extra = process.env.NODE_EXTRA_CA_CERTS;
  const list = [...tls.rootCertificates, readFileSync(caFile, 'utf8')];
  if (extra) {
    try {
      list.push(readFileSync(extra, 'utf8'));
    } catch {
      /* Node already warned at start-up */
    }
  }
  return list;
}

export interface OutboundResult {
  status: number;
  latencyMs: number;
}

export interface OutboundRequest {
  method: string;
  headers: Record<string, string>;
  body: string | Buffer;
  timeoutMs: number;
  ca?: string[] | undefined;
  signal?: AbortSignal;
  /** Bytes of the response body read (then discarded); the rest is dropped with the socket. */
  maxResponseBytes?: number;
}

/**
 * One HTTPS request through the guard: the URL is checked, the connection pinned to checked
 * addresses, TLS verified, redirects not followed (a 3xx is returned as is), and the whole exchange
 * bounded by timeoutMs. Rejects on network errors, refusal and timeout.
 */
export async function guardedRequest(guard: OutboundGuard, url: string, r: OutboundRequest): Promise<OutboundResult> {
  const u = new URL(url);
  await guard.checkUrl(url);
  const started = performance.now();
  return new Promise<OutboundResult>((resolve, reject) => {
    let settled = false;
    const done = (e: Error | null, status = 0): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      r.signal?.removeEventListener('abort', onAbort);
      if (e) reject(e);
      else resolve({ status, latencyMs: Math.round(performance.now() - started) });
    };
    const req = https.request(
      {
        protocol: 'https:',
        hostname: u.hostname.replace(/^\[|\]$/g, ''),
        port: u.port || 443,
        path: `${u.pathname}${u.search}`,
        method: r.method,
        headers: { ...r.headers, 'Content-Length': String(Buffer.byteLength(r.body)) },
        servername: net.isIP(u.hostname.replace(/^\[|\]$/g, '')) ? undefined : u.hostname,
        lookup: guard.lookup as never,
        agent: false,
        rejectUnauthorized: true,
        ...(r.ca ? { ca: r.ca } : {}),
      },
      (res) => {
        let read = 0;
        const cap = r.maxResponseBytes ?? 64 * 1024;
        res.on('data', (c: Buffer) => {
          read += c.length;
          if (read > cap) res.destroy();
        });
        res.on('end', () => done(null, res.statusCode ?? 0));
        res.on('close', () => done(null, res.statusCode ?? 0));
        res.on('error', () => done(null, res.statusCode ?? 0));
      },
    );
    const timer = setTimeout(() => {
      req.destroy();
      done(new Error(`timed out after ${r.timeoutMs} ms`));
    }, r.timeoutMs);
    const onAbort = (): void => {
      req.destroy();
      done(new Error('aborted'));
    };
    r.signal?.addEventListener('abort', onAbort);
    req.on('error', (e) => done(e));
    req.end(r.body);
  });
}
