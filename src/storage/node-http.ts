/**
 * A node:http adapter for handleLocalStorageRequest (tests, tools, and a reference for other
 * edges): streams the request body into the handler (node's IncomingMessage is an async iterable
 * with backpressure) and pipes the response stream out.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { LOCAL_STORAGE_PATH } from './local.js';
import type { LocalObjectStore } from './local.js';
import { handleLocalStorageRequest } from './local-http.js';

/** Returns a request listener; requests outside /storage/ get 404. */
export function localStorageListener(store: LocalObjectStore): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    void serve(store, req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  };
}

async function serve(store: LocalObjectStore, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://x');
  if (!url.pathname.startsWith(LOCAL_STORAGE_PATH)) {
    res.writeHead(404).end();
    return;
  }
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v;
  const method = req.method ?? 'GET';
  // URL.pathname keeps percent-encoding, which the handler decodes.
  const out = await handleLocalStorageRequest(
    store,
    { method, path: url.pathname.slice(LOCAL_STORAGE_PATH.length), query: url.searchParams, headers },
    method === 'PUT' ? (req as AsyncIterable<Buffer>) : null,
  );
  const unconsumed = method === 'PUT' && !req.complete;
  if (unconsumed) out.headers['Connection'] = 'close';
  res.writeHead(out.status, out.headers);
  if (out.stream) {
    const s = out.stream as Readable;
    if (method === 'HEAD') {
      s.destroy();
      res.end();
      return;
    }
    try {
      await pipeline(s, res);
    } catch {
      s.destroy();
      res.destroy();
    }
    return;
  }
  res.end(out.body ?? '');
  if (unconsumed) res.once('finish', () => req.destroy());
}
