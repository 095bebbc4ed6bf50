import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import { brotliCompressSync, constants as zlib, gzipSync } from 'node:zlib';
import type { Ctx, RouteDef, StreamResponse } from '../http.js';

/**
 * The web console (console/, a Preact app built by Vite into console/dist) served by the node at `/`:
 *
 * - `/assets/<file>`: Vite's content-hashed files, `Cache-Control: public, max-age=31536000, immutable`;
 *   compressible ones are sent brotli- or gzip-encoded by Accept-Encoding (compressed once, on first
 *   request, and kept in memory with their ETag); a name that is not a built asset is a 404.
 * - `/` and the console's client-side routes (`/workflows/...`, `/tasks/...`, the sections below):
 *   index.html with `Cache-Control: no-cache` (revalidated by ETag), so a new build is picked up at
 *   once while the hashed assets are cached for a year.
 *
 * Only the console's own sections are routed here, never a catch-all: /api/*, /storage/*, /healthz,
 * /readyz, /metrics, /mcp and the identity mail pages keep their 404/405 answers. A node whose
 * console was not built answers the console paths with a 503 page saying how to build it.
 */

/** The console's client-side sections (console/src/app.tsx routes live under these). */
export const CONSOLE_SECTIONS = ['login', 'register', 'devices', 'workflows', 'tasks', 'agents', 'services', 'webhooks', 'credentials', 'members', 'notifications'] as const;

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.json': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.webp': 'image/webp',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
  '.map': 'application/json',
};
const COMPRESSIBLE = new Set(['.js', '.mjs', '.css', '.html', '.json', '.svg', '.txt', '.map']);
/** A built asset is a plain file name (Vite: name-hash.ext); nothing else is looked up on disk. */
const ASSET_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/;
const MAX_ASSET_BYTES = 8 * 1024 * 1024;

interface Encoded {
  body: Buffer;
  encoding: 'br' | 'gzip' | null;
}

interface CachedFile {
  type: string;
  etag: string;
  identity: Buffer;
  br: Buffer | null;
  gzip: Buffer | null;
}

function load(path: string, ext: string): CachedFile | null {
  let st;
  try {
    st = statSync(path);
  } catch {
    return null;
  }
  if (!st.isFile() || st.size > MAX_ASSET_BYTES) return null;
  const identity = readFileSync(path);
  const compress = COMPRESSIBLE.has(ext) && identity.length >= 1024;
  const br = compress ? brotliCompressSync(identity, { params: { [zlib.BROTLI_PARAM_QUALITY]: 11, [zlib.BROTLI_PARAM_SIZE_HINT]: identity.length } }) : null;
  const gzip = compress ? gzipSync(identity, { level: 9 }) : null;
  return {
    type: TYPES[ext] ?? 'application/octet-stream',
    etag: `"${createHash('sha256').update(identity).digest('base64url').slice(0, 27)}"`,
    identity,
    br: br && br.length < identity.length ? br : null,
    gzip: gzip && gzip.length < identity.length ? gzip : null,
  };
}

/** The best encoding the client accepts (q=0 refuses one). */
export function pickEncoding(f: CachedFile, acceptEncoding: string | undefined): Encoded {
  const accepted = new Map<string, number>();
  for (const part of (acceptEncoding ?? '').split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    const q = params.map((p) => /^\s*q=([0-9.]+)\s*$/.exec(p)).find(Boolean);
    accepted.set(name, q ? Number(q[1]) : 1);
  }
  const ok = (n: string): boolean => (accepted.get(n) ?? accepted.get('*') ?? 0) > 0;
  if (f.br && ok('br')) return { body: f.br, encoding: 'br' };
  if (f.gzip && ok('gzip')) return { body: f.gzip, encoding: 'gzip' };
  return { body: f.identity, encoding: null };
}

function etagMatches(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  return header.split(',').some((t) => {
    const v = t.trim().replace(/^W\//, '');
    return v === '*' || v === etag;
  });
}

export interface ConsoleRouteOptions {
  /** The built console (console/dist). */
  dir: string;
  /** Origins besides the node's own that the console fetches from or shows images of (object store URLs). */
  extraOrigins?: () => string[];
}

export function consoleRoutes(o: ConsoleRouteOptions): RouteDef[] {
  const assets = new Map<string, CachedFile | null>();
  let index: CachedFile | null = null;

  const csp = (): string => {
    const extra = [...new Set((o.extraOrigins?.() ?? []).filter((x) => /^https?:\/\/[^\s;,']+$/.test(x)))].join(' ');
    const plus = extra ? ` ${extra}` : '';
    return [
      "default-src 'self'",
      "script-src 'self'",
      "style-src 'self'",
      `img-src 'self' data: blob:${plus}`,
      `connect-src 'self'${plus}`,
      "font-src 'self'",
      "object-src 'none'",
      "base-uri 'none'",
      "form-action 'self'",
      "frame-ancestors 'none'",
    ].join('; ');
  };

  const send = (ctx: Ctx, res: StreamResponse, f: CachedFile, cacheControl: string, extra: Array<[string, string]> = []): void => {
    const common: Array<[string, string]> = [
      ['Cache-Control', cacheControl],
      ['ETag', f.etag],
      ['Vary', 'Accept-Encoding'],
      ['X-Content-Type-Options', 'nosniff'],
      ...extra,
    ];
    const e = pickEncoding(f, ctx.headers['accept-encoding']);
    if (etagMatches(ctx.headers['if-none-match'], f.etag)) {
      // an empty end: uWS's endWithoutBody() on a GET leaves the kept-alive connection unusable
      res.sendWhole(304, common, '');
      return;
    }
    const headers: Array<[string, string]> = [['Content-Type', f.type], ...common];
    if (e.encoding) headers.push(['Content-Encoding', e.encoding]);
    res.sendWhole(200, headers, e.body);
  };

  const notBuilt = (res: StreamResponse): void => {
    res.sendWhole(
      503,
      [
        ['Content-Type', 'text/html; charset=utf-8'],
        ['Cache-Control', 'no-store'],
        ['Content-Security-Policy', "default-src 'none'"],
      ],
      '<!doctype html><meta charset="utf-8"><title>Gantry console not built</title><h1>The console is not built</h1><p>Build it with <code>npm run build:console</code> (it runs on <code>npm ci</code>/<code>npm install</code> when the dev dependencies are installed), then reload. The API is served at /api/v1.</p>',
    );
  };

  const serveIndex = async (ctx: Ctx, res: StreamResponse): Promise<void> => {
    index ??= load(join(o.dir, 'index.html'), '.html');
    if (!index) return notBuilt(res);
    send(ctx, res, index, 'no-cache', [
      ['Content-Security-Policy', csp()],
      ['Referrer-Policy', 'no-referrer'],
      ['X-Frame-Options', 'DENY'],
    ]);
  };

  const serveAsset = async (ctx: Ctx, res: StreamResponse): Promise<void> => {
    const name = ctx.params['*'] ?? '';
    let f: CachedFile | null | undefined = null;
    if (ASSET_NAME.test(name) && !name.includes('..')) {
      f = assets.get(name);
      if (f === undefined) {
        f = load(join(o.dir, 'assets', name), extname(name).toLowerCase());
        // misses are not cached (a name never built stays a cheap stat), hits are
        if (f) assets.set(name, f);
      }
    }
    if (!f) {
      res.json(404, { error_message: `no console asset ${name}`, error_code: 'route_not_found' }, { 'Cache-Control': 'no-store' });
      return;
    }
    send(ctx, res, f, 'public, max-age=31536000, immutable');
  };

  // the console's files are not API operations: left out of the OpenAPI document
  const doc = { summary: 'the web console', tags: ['console'], responses: {}, hidden: true };
  const page = (path: string): RouteDef => ({ method: 'GET', path, absolute: true, auth: { kinds: 'public' }, tag: 'console', doc, stream: serveIndex });
  return [
    page('/'),
    ...CONSOLE_SECTIONS.map((s) => page(`/${s}/*`)),
    { method: 'GET', path: '/assets/*', absolute: true, auth: { kinds: 'public' }, tag: 'console', doc, stream: serveAsset },
  ];
}
