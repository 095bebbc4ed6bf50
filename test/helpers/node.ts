import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, type RawConfig } from '../../src/shared/config.js';
import { createLogger, type Logger } from '../../src/shared/logger.js';
import { startNode, type GantryNode } from '../../src/main.js';
import type { Clock } from '../../src/shared/clock.js';
import { createTestDatabase, type TestDatabase } from './pg.js';
import { validatorFor } from './openapi-validate.js';

export interface TestNode {
  node: GantryNode;
  baseUrl: string;
  origin: string;
  dataDir: string;
  db: TestDatabase;
  http: HttpClient;
  stop(): Promise<void>;
}

export interface ReqOptions {
  body?: unknown;
  rawBody?: string | Buffer;
  token?: string;
  team?: string;
  headers?: Record<string, string>;
}

export interface HttpResult<T = any> {
  status: number;
  body: T;
  headers: Headers;
  text: string;
}

export class HttpClient {
  constructor(readonly baseUrl: string) {}

  async req<T = any>(method: string, path: string, o: ReqOptions = {}): Promise<HttpResult<T>> {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (o.token) headers.authorization = `Bearer ${o.token}`;
    if (o.team) headers['x-team-id'] = o.team;
    let body: string | Buffer | undefined;
    if (o.rawBody !== undefined) body = o.rawBody;
    else if (o.body !== undefined) {
      body = JSON.stringify(o.body);
      headers['content-type'] ??= 'application/json';
    }
    const url = path.startsWith('http') ? path : `${this.baseUrl}${path}`;
    const res = await fetch(url, { method, headers, body: body as BodyInit | undefined });
    const text = await res.text();
    let parsed: unknown = text;
    if ((res.headers.get('content-type') ?? '').includes('json') && text) parsed = JSON.parse(text);
    if (!path.startsWith('http')) {
      // every response of a documented route must match the node's OpenAPI document
      const v = await validatorFor(this.baseUrl);
      const problem = v?.check(method, new URL(url).pathname, res.status, res.headers.get('content-type') ?? '', parsed) ?? null;
      if (problem) {
        // also on stderr: a test that swallows request errors must not hide a mismatch
        process.stderr.write(`OpenAPI document mismatch: ${problem}\n`);
        throw new Error(`OpenAPI document mismatch: ${problem}`);
      }
    }
    return { status: res.status, body: parsed as T, headers: res.headers, text };
  }

  get<T = any>(path: string, o?: ReqOptions) {
    return this.req<T>('GET', path, o);
  }
  post<T = any>(path: string, body?: unknown, o: ReqOptions = {}) {
    return this.req<T>('POST', path, { ...o, body });
  }
  put<T = any>(path: string, body?: unknown, o: ReqOptions = {}) {
    return this.req<T>('PUT', path, { ...o, body });
  }
  patch<T = any>(path: string, body?: unknown, o: ReqOptions = {}) {
    return this.req<T>('PATCH', path, { ...o, body });
  }
  del<T = any>(path: string, o?: ReqOptions) {
    return this.req<T>('DELETE', path, o);
  }
}

/**
 * Starts a Gantry node in-process on a free port against a fresh PostgreSQL database and a
 * temporary data directory. Everything it started is removed by stop().
 */
/** opts.logger: a logger of the test's own (e.g. writing to a stream it reads), instead of the silent one. */
/** opts.usageNow: the clock of usage budgets alone (a month's reset without moving the node's timers). */
export async function startTestNode(overrides: Partial<RawConfig> = {}, label = 'node', opts: { clock?: Clock; logger?: Logger; usageNow?: () => number } = {}): Promise<TestNode> {
  const db = await createTestDatabase(label);
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-test-'));
  const config = loadConfig(
    {},
    {
      DATABASE_URL: db.url,
      GANTRY_DATA_DIR: dataDir,
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_HTTP_PORT: 0,
      GANTRY_GRPC_HOST: '127.0.0.1',
      GANTRY_GRPC_PORT: 0,
      GANTRY_DEBUG_ROUTES: true,
      GANTRY_DB_POOL_MAX: 5,
      GANTRY_OUTBOUND_ALLOWLIST: '127.0.0.1,::1,localhost',
      ...overrides,
    },
  );
  const logger = opts.logger ?? createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
  const node = await startNode(config, { logger, ...(opts.clock ? { clock: opts.clock } : {}), ...(opts.usageNow ? { usageNow: opts.usageNow } : {}) });
  const origin = `http://127.0.0.1:${node.httpPort}`;
  return {
    node,
    baseUrl: node.baseUrl,
    origin,
    dataDir,
    db,
    http: new HttpClient(node.baseUrl),
    async stop() {
      await node.close();
      await db.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
