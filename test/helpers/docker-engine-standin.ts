/**
 * A protocol-level stand-in for the Docker Engine API (HTTP on 127.0.0.1:<free port> or on a unix
 * socket), for exactly the calls the agent's docker runtime makes, with the Engine API's paths
 * (any /v1.xx version prefix accepted), status codes and JSON shapes:
 *
 *   GET    /_ping
 *   GET    /images/{name}/json                   404 {"message":"No such image: x"} until pulled
 *   POST   /images/create?fromImage=&tag=        streams JSON progress lines (404 for unknown images)
 *   POST   /containers/create?name=              201 {Id, Warnings}; 404 no image, 409 name in use
 *   POST   /containers/{id}/start                204; 304 already started
 *   GET    /containers/{id}/json                 ContainerInspectResponse (State, Config, HostConfig, NetworkSettings.Ports)
 *   POST   /containers/{id}/wait?condition=      holds until the container is not running: {StatusCode, Error}
 *   POST   /containers/{id}/stop?t=              204; 304 already stopped
 *   DELETE /containers/{id}?force=               204; 409 running without force
 *   GET    /containers/{id}/logs?stdout=&stderr=&tail=   multiplexed frames (8-byte headers)
 *   GET    /containers/json?all=&filters=        ContainerSummary list (label and status filters)
 *
 * It is not a mock: "running" a container starts the image's registered factory, which starts a
 * real local HTTP server on a free port, published as the container's HostPort, so health checks
 * and traffic reach something real. Every create body is recorded for assertions.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';

export interface StandinContainerContext {
  /** The container's Env as a map. */
  env: Record<string, string>;
  /** The port the container said it exposes (ExposedPorts). */
  exposedPort: number;
  /** Writes a line to the container's stdout or stderr log. */
  log(line: string, stream?: 'stdout' | 'stderr'): void;
  /** The container's main process exits on its own with this code. */
  exit(code: number): void;
}

export interface StandinProcess {
  /** The real local port the "container" serves on (published as HostPort). */
  port: number;
  /** SIGTERM: stop serving; resolves once stopped. */
  stop(): Promise<void>;
}

export type ImageFactory = (ctx: StandinContainerContext) => Promise<StandinProcess>;

export interface CreateRecord {
  name: string;
  body: Record<string, any>;
}

interface LogEntry {
  stream: 1 | 2;
  line: string;
}

interface StandinContainer {
  id: string;
  name: string;
  image: string;
  imageId: string;
  created: Date;
  body: Record<string, any>;
  status: 'created' | 'running' | 'exited';
  exitCode: number;
  startedAt: string;
  finishedAt: string;
  pid: number;
  logs: LogEntry[];
  proc: StandinProcess | null;
  hostPort: number;
  waiters: Array<(code: number) => void>;
  /** Bumped on every start: a stale exit() of an earlier run is ignored. */
  run: number;
}

export interface DockerEngineStandin {
  /** host/port when listening on TCP. */
  host: string;
  port: number;
  /** The unix socket when listening on one. */
  socketPath: string | undefined;
  /** Every POST /containers/create body, in order. */
  creates: CreateRecord[];
  /** Every image pull (POST /images/create). */
  pulls: Array<{ fromImage: string; tag: string }>;
  /** Every request as "METHOD /path" (version prefix and query stripped). */
  requests: string[];
  /** Registers an image: pullable, and what a container of it runs. */
  registerImage(name: string, factory: ImageFactory, opts?: { pulled?: boolean }): void;
  /** The container's main process exits with code (as if it crashed). */
  exitContainer(idOrName: string, code: number): void;
  /** A container's state for assertions. */
  container(idOrName: string): { id: string; name: string; status: string; exitCode: number; hostPort: number; labels: Record<string, string> } | undefined;
  containerCount(): number;
  close(): Promise<void>;
}

const NANO_ZERO = '0001-01-01T00:00:00Z';
const NOT_FOUND = (what: string) => ({ message: what });

/** "name" -> "name:latest"; a docker.io/library/ prefix is dropped. */
export function normalizeImage(ref: string): string {
  let r = ref.replace(/^docker\.io\/(library\/)?/, '');
  if (r.includes('@')) return r;
  const last = r.slice(r.lastIndexOf('/') + 1);
  if (!last.includes(':')) r += ':latest';
  return r;
}

/**
 * An HTTP service factory (what most test images run): GET /health (503 after /fail-health, 200
 * after /heal-health), GET /env/NAME, POST /exit?code=N (the container exits with N), anything else
 * "hello from <image>".
 */
export function httpServiceFactory(image = 'service'): ImageFactory {
  return async (ctx) => {
    let healthy = true;
    const server = http.createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (url.pathname === '/health') {
        res.statusCode = healthy ? 200 : 503;
        res.end(healthy ? 'ok' : 'sick');
      } else if (url.pathname === '/fail-health') {
        healthy = false;
        res.end('ok');
      } else if (url.pathname === '/heal-health') {
        healthy = true;
        res.end('ok');
      } else if (url.pathname.startsWith('/env/')) {
        const v = ctx.env[decodeURIComponent(url.pathname.slice(5))];
        res.statusCode = v === undefined ? 404 : 200;
        res.end(v ?? '');
      } else if (url.pathname === '/exit') {
        const code = Number(url.searchParams.get('code') ?? '0');
        ctx.log(`exiting with ${code} as asked`, 'stderr');
        res.end('bye', () => ctx.exit(code));
      } else {
        res.end(`hello from ${image}`);
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    ctx.log(`${image}: listening on ${ctx.exposedPort}`);
    ctx.log(`${image}: warming up`, 'stderr');
    return {
      port,
      stop: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  };
}

function frame(stream: 1 | 2, payload: string): Buffer {
  const data = Buffer.from(payload, 'utf8');
  const header = Buffer.alloc(8);
  header.writeUInt8(stream, 0);
  header.writeUInt32BE(data.length, 4);
  return Buffer.concat([header, data]);
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => resolve(body));
    req.on('error', reject);
  });
}

function truthy(v: string | null): boolean {
  return v === '1' || v === 'true' || v === 'True';
}

export async function startDockerEngineStandin(opts: { socketPath?: string; images?: Record<string, ImageFactory>; pulled?: string[] } = {}): Promise<DockerEngineStandin> {
  const factories = new Map<string, ImageFactory>();
  const pulledImages = new Map<string, string>(); // name -> image id
  const containers = new Map<string, StandinContainer>();
  const creates: CreateRecord[] = [];
  const pulls: Array<{ fromImage: string; tag: string }> = [];
  const requests: string[] = [];
  let nextPid = 4000;

  const imageId = () => `sha256:${randomBytes(32).toString('hex')}`;
  const registerImage = (name: string, factory: ImageFactory, o: { pulled?: boolean } = {}) => {
    factories.set(normalizeImage(name), factory);
    if (o.pulled) pulledImages.set(normalizeImage(name), imageId());
  };
  for (const [name, f] of Object.entries(opts.images ?? {})) registerImage(name, f);
  for (const name of opts.pulled ?? []) pulledImages.set(normalizeImage(name), imageId());

  const lookup = (idOrName: string): StandinContainer | undefined => {
    const key = idOrName.replace(/^\//, '');
    for (const c of containers.values()) if (c.id === key || c.name === key) return c;
    if (key.length >= 3) {
      const byPrefix = [...containers.values()].filter((c) => c.id.startsWith(key));
      if (byPrefix.length === 1) return byPrefix[0];
    }
    return undefined;
  };

  const exposedPortOf = (c: StandinContainer): string | undefined => Object.keys((c.body['ExposedPorts'] as Record<string, unknown> | undefined) ?? {})[0];

  const finish = (c: StandinContainer, code: number) => {
    if (c.status !== 'running') return;
    c.status = 'exited';
    c.exitCode = code;
    c.finishedAt = new Date().toISOString();
    c.pid = 0;
    const waiters = c.waiters.splice(0);
    for (const w of waiters) w(code);
  };

  const stopProc = async (c: StandinContainer, code: number) => {
    const proc = c.proc;
    c.proc = null;
    if (proc) await proc.stop();
    finish(c, code);
  };

  const startContainer = async (c: StandinContainer): Promise<void> => {
    const factory = factories.get(c.image);
    if (!factory) throw new Error(`no factory for image ${c.image}`);
    const env: Record<string, string> = {};
    for (const kv of (c.body['Env'] as string[] | undefined) ?? []) {
      const i = kv.indexOf('=');
      if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
    }
    const run = ++c.run;
    const exposed = exposedPortOf(c);
    c.status = 'running';
    c.startedAt = new Date().toISOString();
    c.finishedAt = NANO_ZERO;
    c.pid = nextPid++;
    c.exitCode = 0;
    const proc = await factory({
      env,
      exposedPort: exposed ? Number(exposed.split('/')[0]) : 0,
      log: (line, stream = 'stdout') => c.logs.push({ stream: stream === 'stderr' ? 2 : 1, line }),
      exit: (code) => {
        if (c.run !== run || c.status !== 'running') return;
        void stopProc(c, code);
      },
    });
    if (c.run !== run || c.status !== 'running') {
      await proc.stop();
      return;
    }
    c.proc = proc;
    c.hostPort = proc.port;
  };

  const portsOf = (c: StandinContainer): Record<string, Array<{ HostIp: string; HostPort: string }> | null> => {
    const exposed = exposedPortOf(c);
    if (!exposed || c.status !== 'running') return {};
    const wanted = (c.body['HostConfig']?.PortBindings?.[exposed] as Array<{ HostIp?: string }> | undefined) ?? [];
    if (wanted.length === 0) return { [exposed]: null };
    return { [exposed]: wanted.map((b) => ({ HostIp: b.HostIp || '0.0.0.0', HostPort: String(c.hostPort) })) };
  };

  const labelsOf = (c: StandinContainer): Record<string, string> => (c.body['Labels'] as Record<string, string> | undefined) ?? {};

  const stateOf = (c: StandinContainer) => ({
    Status: c.status,
    Running: c.status === 'running',
    Paused: false,
    Restarting: false,
    OOMKilled: false,
    Dead: false,
    Pid: c.pid,
    ExitCode: c.exitCode,
    Error: '',
    StartedAt: c.startedAt,
    FinishedAt: c.finishedAt,
  });

  const inspect = (c: StandinContainer) => ({
    Id: c.id,
    Created: c.created.toISOString(),
    Path: 'entrypoint',
    Args: [],
    State: stateOf(c),
    Image: c.imageId,
    Name: `/${c.name}`,
    RestartCount: 0,
    Driver: 'overlay2',
    Platform: 'linux',
    HostConfig: c.body['HostConfig'] ?? {},
    Mounts: ((c.body['HostConfig']?.Binds as string[] | undefined) ?? []).map((b) => {
      const [src, dst] = b.split(':');
      return { Type: 'bind', Source: src, Destination: dst, Mode: '', RW: true, Propagation: 'rprivate' };
    }),
    Config: {
      Hostname: c.id.slice(0, 12),
      Image: c.body['Image'],
      Env: c.body['Env'] ?? [],
      Labels: labelsOf(c),
      ExposedPorts: c.body['ExposedPorts'] ?? {},
      Tty: false,
    },
    NetworkSettings: {
      Bridge: '',
      SandboxID: '',
      Ports: portsOf(c),
      IPAddress: c.status === 'running' ? '172.17.0.2' : '',
      Networks: {},
    },
  });

  const summary = (c: StandinContainer) => {
    const exposed = exposedPortOf(c);
    const ports: Array<{ IP?: string; PrivatePort: number; PublicPort?: number; Type: string }> = [];
    if (exposed) {
      const [p, type] = exposed.split('/');
      const bindings = portsOf(c)[exposed];
      if (bindings && bindings.length) for (const b of bindings) ports.push({ IP: b.HostIp, PrivatePort: Number(p), PublicPort: Number(b.HostPort), Type: type ?? 'tcp' });
      else ports.push({ PrivatePort: Number(p), Type: type ?? 'tcp' });
    }
    return {
      Id: c.id,
      Names: [`/${c.name}`],
      Image: c.body['Image'],
      ImageID: c.imageId,
      Command: 'entrypoint',
      Created: Math.floor(c.created.getTime() / 1000),
      Ports: ports,
      Labels: labelsOf(c),
      State: c.status,
      Status: c.status === 'running' ? 'Up Less than a second' : c.status === 'exited' ? `Exited (${c.exitCode}) Less than a second ago` : 'Created',
      HostConfig: { NetworkMode: 'default' },
      NetworkSettings: { Networks: {} },
      Mounts: [],
    };
  };

  const matchesFilters = (c: StandinContainer, filters: Record<string, string[] | Record<string, boolean>>): boolean => {
    const values = (k: string): string[] => {
      const v = filters[k];
      if (!v) return [];
      return Array.isArray(v) ? v : Object.keys(v).filter((x) => v[x]);
    };
    const labels = labelsOf(c);
    for (const f of values('label')) {
      const i = f.indexOf('=');
      if (i < 0 ? !(f in labels) : labels[f.slice(0, i)] !== f.slice(i + 1)) return false;
    }
    const statuses = values('status');
    if (statuses.length && !statuses.includes(c.status)) return false;
    const names = values('name');
    if (names.length && !names.some((n) => c.name.includes(n.replace(/^\//, '')))) return false;
    const ids = values('id');
    if (ids.length && !ids.some((id) => c.id.startsWith(id))) return false;
    return true;
  };

  const json = (res: http.ServerResponse, status: number, body: unknown) => {
    const s = JSON.stringify(body);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(s), 'Api-Version': '1.47', Server: 'Docker/27.3.1 (linux)' });
    res.end(s);
  };
  const empty = (res: http.ServerResponse, status: number) => {
    res.writeHead(status, { 'Api-Version': '1.47' });
    res.end();
  };

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://docker');
    const p = url.pathname.replace(/^\/v\d+(\.\d+)?(?=\/)/, '');
    const method = req.method ?? 'GET';
    const q = url.searchParams;
    requests.push(`${method} ${p}`);
    const body = method === 'POST' ? await readBody(req) : '';
    let m: RegExpMatchArray | null;

    if (p === '/_ping' && (method === 'GET' || method === 'HEAD')) {
      res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'Api-Version': '1.47' });
      res.end('OK');
      return;
    }
    if (method === 'GET' && (m = p.match(/^\/images\/(.+)\/json$/))) {
      const name = normalizeImage(decodeURIComponent(m[1]!));
      const id = pulledImages.get(name);
      if (!id) return json(res, 404, NOT_FOUND(`No such image: ${name}`));
      return json(res, 200, { Id: id, RepoTags: [name], RepoDigests: [], Created: new Date().toISOString(), Size: 1024, Architecture: 'amd64', Os: 'linux', Config: {} });
    }
    if (method === 'POST' && p === '/images/create') {
      const fromImage = q.get('fromImage') ?? '';
      const tag = q.get('tag') ?? 'latest';
      const name = normalizeImage(fromImage.includes(':') || fromImage.includes('@') ? fromImage : `${fromImage}:${tag}`);
      pulls.push({ fromImage, tag });
      if (!factories.has(name)) {
        return json(res, 404, NOT_FOUND(`pull access denied for ${fromImage}, repository does not exist or may require 'docker login': denied: requested access to the resource is denied`));
      }
      res.writeHead(200, { 'Content-Type': 'application/json', 'Api-Version': '1.47' });
      const layer = randomBytes(6).toString('hex');
      const lines = [
        { status: `Pulling from ${fromImage}`, id: tag },
        { status: 'Pulling fs layer', progressDetail: {}, id: layer },
        { status: 'Downloading', progressDetail: { current: 512, total: 1024 }, progress: '[=========================>                         ]     512B/1.024kB', id: layer },
        { status: 'Download complete', progressDetail: {}, id: layer },
        { status: 'Pull complete', progressDetail: {}, id: layer },
        { status: `Digest: sha256:${randomBytes(32).toString('hex')}` },
        { status: `Status: Downloaded newer image for ${name}` },
      ];
      for (const l of lines) res.write(`${JSON.stringify(l)}\r\n`);
      pulledImages.set(name, imageId());
      res.end();
      return;
    }
    if (method === 'POST' && p === '/containers/create') {
      let parsed: Record<string, any>;
      try {
        parsed = JSON.parse(body || '{}') as Record<string, any>;
      } catch {
        return json(res, 400, { message: 'invalid JSON' });
      }
      const image = normalizeImage(String(parsed['Image'] ?? ''));
      const id = randomBytes(32).toString('hex');
      const name = (q.get('name') ?? '').replace(/^\//, '') || `standin_${id.slice(0, 8)}`;
      if (!/^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/.test(name)) return json(res, 400, { message: `Invalid container name (${name}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed` });
      if (lookup(name)) {
        return json(res, 409, { message: `Conflict. The container name "/${name}" is already in use by container "${lookup(name)!.id}". You have to remove (or rename) that container to be able to reuse that name.` });
      }
      const imgId = pulledImages.get(image);
      if (!imgId) return json(res, 404, NOT_FOUND(`No such image: ${image}`));
      creates.push({ name, body: parsed });
      containers.set(id, { id, name, image, imageId: imgId, created: new Date(), body: parsed, status: 'created', exitCode: 0, startedAt: NANO_ZERO, finishedAt: NANO_ZERO, pid: 0, logs: [], proc: null, hostPort: 0, waiters: [], run: 0 });
      return json(res, 201, { Id: id, Warnings: [] });
    }
    if (method === 'GET' && p === '/containers/json') {
      let filters: Record<string, string[] | Record<string, boolean>> = {};
      try {
        filters = JSON.parse(q.get('filters') || '{}') as typeof filters;
      } catch {
        return json(res, 400, { message: 'invalid filter' });
      }
      const all = truthy(q.get('all'));
      const list = [...containers.values()].filter((c) => (all || c.status === 'running') && matchesFilters(c, filters));
      return json(res, 200, list.map(summary));
    }
    if ((m = p.match(/^\/containers\/([^/]+)(\/[a-z]+)?$/))) {
      const c = lookup(decodeURIComponent(m[1]!));
      const op = m[2] ?? '';
      if (!c) return json(res, 404, NOT_FOUND(`No such container: ${decodeURIComponent(m[1]!)}`));
      if (method === 'POST' && op === '/start') {
        if (c.status === 'running') return empty(res, 304);
        try {
          await startContainer(c);
        } catch (e) {
          c.status = 'exited';
          c.exitCode = 128;
          return json(res, 500, { message: `failed to create task for container: ${(e as Error).message}` });
        }
        return empty(res, 204);
      }
      if (method === 'GET' && op === '/json') return json(res, 200, inspect(c));
      if (method === 'POST' && op === '/wait') {
        const condition = q.get('condition') || 'not-running';
        if (condition !== 'not-running' && condition !== 'next-exit') return json(res, 400, { message: `invalid condition: "${condition}"` });
        // the engine sends the headers at once and the body when the container stops
        res.writeHead(200, { 'Content-Type': 'application/json', 'Api-Version': '1.47' });
        res.flushHeaders();
        const reply = (code: number) => {
          if (!res.writableEnded && !res.destroyed) res.end(JSON.stringify({ StatusCode: code, Error: null }));
        };
        if (condition === 'not-running' && c.status !== 'running') return reply(c.exitCode);
        c.waiters.push(reply);
        res.on('close', () => {
          const i = c.waiters.indexOf(reply);
          if (i >= 0) c.waiters.splice(i, 1);
        });
        return;
      }
      if (method === 'POST' && op === '/stop') {
        if (c.status !== 'running') return empty(res, 304);
        await stopProc(c, 143);
        return empty(res, 204);
      }
      if (method === 'DELETE' && op === '') {
        if (c.status === 'running') {
          if (!truthy(q.get('force'))) {
            return json(res, 409, { message: `cannot remove container "/${c.name}": container is running: stop the container before removing or force remove` });
          }
          await stopProc(c, 137);
        }
        containers.delete(c.id);
        return empty(res, 204);
      }
      if (method === 'GET' && op === '/logs') {
        const wantOut = truthy(q.get('stdout'));
        const wantErr = truthy(q.get('stderr'));
        if (!wantOut && !wantErr) return json(res, 400, { message: 'Bad parameters: you must choose at least one stream' });
        let entries = c.logs.filter((l) => (l.stream === 1 ? wantOut : wantErr));
        const tail = q.get('tail');
        if (tail && tail !== 'all') {
          const n = Number(tail);
          if (Number.isInteger(n) && n >= 0) entries = n === 0 ? [] : entries.slice(-n);
        }
        const buf = Buffer.concat(entries.map((l) => frame(l.stream, `${l.line}\n`)));
        res.writeHead(200, { 'Content-Type': 'application/vnd.docker.multiplexed-stream', 'Content-Length': buf.length, 'Api-Version': '1.47' });
        res.end(buf);
        return;
      }
    }
    return json(res, 404, { message: 'page not found' });
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      if (!res.headersSent) json(res, 500, { message: (e as Error).message });
      else res.destroy();
    });
  });
  if (opts.socketPath) {
    await rm(opts.socketPath, { force: true });
    await new Promise<void>((resolve) => server.listen(opts.socketPath, resolve));
  } else {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  }
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;

  return {
    host: '127.0.0.1',
    port,
    socketPath: opts.socketPath,
    creates,
    pulls,
    requests,
    registerImage,
    exitContainer(idOrName, code) {
      const c = lookup(idOrName);
      if (!c) throw new Error(`no container ${idOrName}`);
      c.logs.push({ stream: 2, line: `process exited with code ${code}` });
      void stopProc(c, code);
    },
    container(idOrName) {
      const c = lookup(idOrName);
      return c && { id: c.id, name: c.name, status: c.status, exitCode: c.exitCode, hostPort: c.hostPort, labels: labelsOf(c) };
    },
    containerCount: () => containers.size,
    async close() {
      await Promise.all([...containers.values()].map((c) => stopProc(c, 137)));
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      if (opts.socketPath) await rm(opts.socketPath, { force: true });
    },
  };
}
