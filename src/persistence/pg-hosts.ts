import { Socket } from 'node:net';
import pg from 'pg';

/**
 * libpq-style multi-host DATABASE_URL for node-postgres, which connects to one host only:
 * `postgres://user@h1:5432,h2:5433/db?target_session_attrs=read-write`.
 *
 * How it works: the pg client is given a `stream` factory whose socket connects to the host the
 * rotation currently points at (instead of the URL's first host). A connection that cannot be
 * opened (refused, reset, timed out) moves the rotation to the next host; with
 * target_session_attrs=read-write a new connection runs `select pg_is_in_recovery()` before the
 * pool hands it out, and a server in recovery (a standby) is refused and moves the rotation too.
 * The pool's own create retries then reach the next host. Every connection is checked, so after a
 * failover (standby promoted, old primary stopped) new connections find the new primary within a
 * few connect attempts; statements on connections to the old primary fail and answer 503
 * database_unavailable meanwhile (they are not retried: the caller's client retries after
 * Retry-After).
 */
export interface PgHost {
  host: string;
  port: number;
}

export interface MultiHostUrl {
  hosts: PgHost[];
  /** 'read-write' | 'any' (libpq's other values are refused). */
  targetSessionAttrs: 'read-write' | 'any';
  /** The same URL naming only the first host, target_session_attrs removed: what MikroORM/pg parse. */
  singleHostUrl: string;
  /** The same URL naming only host `h` (one of `hosts`), target_session_attrs removed. */
  urlFor(h: PgHost): string;
}

/** scheme, userinfo up to the authority's last @ (a password may hold an unencoded @), host list, the rest. */
const URL_RE = /^(postgres(?:ql)?:\/\/)([^/?#]*@)?([^@/?#]*)(.*)$/;

/**
 * Parses a postgres:// URL that may name several hosts (comma-separated host[:port], [ipv6]:port;
 * a host without a port gets 5432). Returns null for a URL it does not recognise.
 */
export function parseMultiHostUrl(url: string): MultiHostUrl | null {
  const m = URL_RE.exec(url);
  if (!m) return null;
  const [, scheme, auth = '', hostPart = '', rest = ''] = m;
  const hosts: PgHost[] = [];
  for (const h of hostPart.split(',')) {
    if (!h) return null;
    const bracket = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(h);
    const plain = /^([^:]+)(?::(\d{1,5}))?$/.exec(h);
    const hm = bracket ?? plain;
    if (!hm) return null;
    hosts.push({ host: hm[1]!, port: hm[2] ? Number(hm[2]) : 5432 });
  }
  if (!hosts.length) return null;
  let tsa: MultiHostUrl['targetSessionAttrs'] = 'any';
  let tail = rest;
  const q = rest.indexOf('?');
  if (q >= 0) {
    const params = new URLSearchParams(rest.slice(q + 1));
    const v = params.get('target_session_attrs');
    if (v !== null) {
      if (v !== 'read-write' && v !== 'any') throw new Error(`DATABASE_URL: target_session_attrs=${v} is not supported (read-write or any)`);
      tsa = v;
      params.delete('target_session_attrs');
    }
    const qs = params.toString();
    tail = rest.slice(0, q) + (qs ? `?${qs}` : '');
  }
  const urlFor = (h: PgHost): string => `${scheme}${auth}${h.host.includes(':') ? `[${h.host}]` : h.host}:${h.port}${tail}`;
  return { hosts, targetSessionAttrs: tsa, singleHostUrl: urlFor(hosts[0]!), urlFor };
}

/**
 * The single-host URL of the server libpq would settle on now: the first host, in the URL's order,
 * that accepts a connection and (with target_session_attrs=read-write) is not in recovery. For
 * tools that take one server (pg_dump, pg_restore: `gantry backup`/`restore`), so that every step of
 * the command talks to the same primary. A URL naming one host without session attributes is
 * returned unchanged (nothing is checked). Throws, naming each host's answer, when none fits.
 */
export async function resolveHostUrl(url: string, o: { connectTimeoutMs?: number } = {}): Promise<{ url: string; host: PgHost | null }> {
  const u = parseMultiHostUrl(url);
  if (!u || !needsRotation(u)) return { url, host: null };
  const why: string[] = [];
  for (const h of u.hosts) {
    const c = new pg.Client({ connectionString: u.urlFor(h), connectionTimeoutMillis: o.connectTimeoutMs ?? 5000 });
    // a refused connection also emits 'error' on the client: connect()'s rejection reports it
    c.on('error', () => {});
    try {
      await c.connect();
      const r = await c.query<{ r: boolean }>('select pg_is_in_recovery() as r');
      if (u.targetSessionAttrs === 'read-write' && r.rows[0]?.r === true) {
        why.push(`${h.host}:${h.port} in recovery (read-only)`);
        continue;
      }
      return { url: u.urlFor(h), host: h };
    } catch (e) {
      why.push(`${h.host}:${h.port} ${(e as Error).message}`);
    } finally {
      await c.end().catch(() => {});
    }
  }
  throw new Error(`no ${u.targetSessionAttrs === 'read-write' ? 'read-write ' : ''}server among the URL's hosts: ${why.join('; ')}`);
}

/** Whether the URL needs the rotation (several hosts, or a session attribute to check). */
export function needsRotation(u: MultiHostUrl): boolean {
  return u.hosts.length > 1 || u.targetSessionAttrs !== 'any';
}

interface PgClientQueryable {
  query(sql: string): Promise<{ rows: Array<Record<string, unknown>> }>;
}

/** The rotation shared by every connection of one pool. */
export class HostRotation {
  private current = 0;

  constructor(readonly url: MultiHostUrl) {}

  /** The host new connections go to now. */
  get host(): PgHost {
    return this.url.hosts[this.current]!;
  }

  /** The host `h` failed: the next connection tries the one after it (unless another failure already moved on). */
  failed(h: PgHost): void {
    if (this.url.hosts[this.current] === h) this.current = (this.current + 1) % this.url.hosts.length;
  }

  /** pg's `stream` option: a socket that connects to the rotation's current host, whatever pg asks for. */
  stream = (): Socket => {
    const socket = new Socket();
    const connect = socket.connect.bind(socket) as (port: number, host: string) => Socket;
    const target = this.host;
    const tagged = socket as unknown as { connect: (port: number, host: string) => Socket; gantryTarget: PgHost; gantryReady?: boolean };
    // closed (refused, reset, connect timeout, startup refused: "the database system is shutting
    // down") before check() accepted it: the host is not usable now
    socket.once('close', () => {
      if (!tagged.gantryReady) this.failed(target);
    });
    tagged.connect = () => connect(target.port, target.host);
    tagged.gantryTarget = target;
    return socket;
  };

  /**
   * Checks a freshly opened connection (knex pool afterCreate): with target_session_attrs=read-write
   * a server in recovery is refused (and the rotation moves on). Resolves when the connection may be used.
   */
  async check(conn: PgClientQueryable & { connection?: { stream?: unknown } }): Promise<void> {
    const socket = conn.connection?.stream as { gantryTarget?: PgHost; gantryReady?: boolean } | undefined;
    const target = socket?.gantryTarget ?? this.host;
    if (this.url.targetSessionAttrs !== 'read-write') {
      if (socket) socket.gantryReady = true;
      return;
    }
    let inRecovery: boolean;
    try {
      const r = await conn.query('select pg_is_in_recovery() as r');
      inRecovery = r.rows[0]?.r === true;
    } catch (e) {
      this.failed(target);
      throw e;
    }
    if (inRecovery) {
      this.failed(target);
      const err = new Error(`server ${target.host}:${target.port} is in recovery (read-only): target_session_attrs=read-write`) as Error & { code: string };
      // 08001 sqlclient_unable_to_establish_sqlconnection: a connection-level failure (503, retried by the pool)
      err.code = '08001';
      throw err;
    }
    if (socket) socket.gantryReady = true;
  }
}
