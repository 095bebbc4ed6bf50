/**
 * The OpenAPI 3.1 document, generated from the live route table (every RouteDef the edge serves)
 * and the zod schemas in each route's `doc` (zod 4's JSON Schema output, draft 2020-12, which is
 * OpenAPI 3.1's schema dialect). Routes without `doc` are listed in `x-undocumented-routes`
 * (test/clients/openapi.test.ts fails on them).
 */
import { z } from 'zod';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import type { ResponseDoc, RouteDoc } from './types.js';
import { NAMED, TASK_EVENTS, WebhookPayload } from './schemas.js';

type Json = Record<string, unknown>;

const METHODS_OF_ANY = ['get', 'post', 'put', 'patch', 'delete'] as const;

const STATUS_TEXT: Record<number, string> = {
  200: 'OK',
  201: 'Created',
  202: 'Accepted',
  204: 'No Content',
  206: 'Partial Content',
  304: 'Not Modified',
  400: 'Bad request: malformed JSON, invalid parameter, missing X-Team-ID for a JWT caller',
  401: 'Credential missing, invalid, revoked or expired',
  403: 'Valid credential lacking permission',
  404: 'Not found in this team',
  405: 'Method not allowed',
  409: 'Conflict (for example a slug already taken or a state that disallows the operation)',
  410: 'Gone',
  412: 'Precondition failed',
  413: 'Request body too large',
  429: 'Rate limited: back off and retry (Retry-After)',
  500: 'Unexpected server error',
  502: 'The agent or gateway tunnel failed talking to the container',
  503: 'Unavailable (retry later)',
};

/** `/r/containers/{serviceSlug}/*` -> `/r/containers/{serviceSlug}/{proxyPath}` */
export const docPath = (path: string): string => path.replace(/\/\*$/, '/{proxyPath}');

/** The interface description's version (the contract: "The interface description is at version 1.0.0"); not the server's package version. */
export const API_DESCRIPTION_VERSION = '1.0.0';

export interface OpenApiOptions {
  /** info.version: API_DESCRIPTION_VERSION. */
  version: string;
  /** The API's base path (routes not `absolute` are documented relative to it). */
  basePath: string;
}

function clean(s: Json): Json {
  const { $schema: _s, $id: _i, ...rest } = s;
  return rest;
}

function operationId(method: string, path: string): string {
  const words = path
    .replace(/\{([^}]+)\}/g, 'by-$1')
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean);
  return [method.toLowerCase(), ...words.map((w) => w[0]!.toUpperCase() + w.slice(1))].join('');
}

function security(auth: RouteAuth): Json[] {
  if (auth.kinds === 'public') return [];
  const out: Json[] = [];
  for (const k of auth.kinds) {
    if (k === 'user') out.push(auth.team ? { bearerJwt: [], teamId: [] } : { bearerJwt: [] });
    else if (k === 'integration') out.push({ integrationKey: [] });
    else if (k === 'device') out.push({ deviceKey: [] });
    else if (k === 'agent') out.push({ agentKey: [] });
  }
  return out;
}

function isResponseDoc(v: unknown): v is ResponseDoc {
  return typeof v === 'object' && v !== null && !(v instanceof z.ZodType);
}

const uri = (id: string): string => `#/components/schemas/${id}`;

/** The operation object of one documented route (its parameters, responses and request body). */
function operation(def: RouteDef, doc: RouteDoc, path: string, schemaOf: (s: z.ZodType) => Json, inputOf: (s: z.ZodType) => Json): Json {
  const parameters: Json[] = [];
  for (const m of path.matchAll(/\{([^}]+)\}/g)) {
    const name = m[1] as string;
    const p: Json = { name, in: 'path', required: true, schema: { type: 'string' } };
    if (name === 'proxyPath') p.description = 'the rest of the path, forwarded as is';
    else if (/Id$/.test(name)) (p.schema as Json).format = 'uuid';
    parameters.push(p);
  }
  if (doc.query) {
    const q = inputOf(doc.query);
    const req = new Set((q.required as string[] | undefined) ?? []);
    for (const [name, s] of Object.entries((q.properties ?? {}) as Record<string, Json>)) {
      const { description, ...schema } = s;
      parameters.push({ name, in: 'query', required: req.has(name), schema, ...(typeof description === 'string' ? { description } : {}) });
    }
  }
  if (doc.paged) {
    parameters.push({ name: 'current_page', in: 'query', required: false, schema: { type: 'integer', minimum: 1, default: 1 } });
    parameters.push({ name: 'per_page', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 100, default: 20 } });
  }
  for (const [name, description] of Object.entries(doc.headers ?? {})) parameters.push({ name, in: 'header', required: false, description, schema: { type: 'string' } });

  const responses: Record<string, Json> = {};
  for (const [status, r] of Object.entries(doc.responses)) {
    if (!r) continue;
    const rd: ResponseDoc = isResponseDoc(r) ? r : { schema: r };
    const resp: Json = { description: rd.description ?? STATUS_TEXT[Number(status)] ?? 'Response' };
    if (rd.sse) {
      resp.content = {
        'text/event-stream': {
          schema: { type: 'string', description: 'Server-Sent Events: each message has id:, event: and data: (JSON) lines; `: keep-alive` comments every 15 s' },
          'x-sse-events': Object.fromEntries(Object.entries(rd.sse).map(([ev, c]) => [ev, { $ref: uri(c) }])),
        },
      };
    } else if (rd.schema) resp.content = { [rd.contentType ?? 'application/json']: { schema: schemaOf(rd.schema) } };
    else if (rd.contentType) resp.content = { [rd.contentType]: { schema: { type: 'string' } } };
    if (rd.headers) resp.headers = Object.fromEntries(Object.entries(rd.headers).map(([h, d]) => [h, { description: d, schema: { type: 'string' } }]));
    responses[status] = resp;
  }
  const errs = new Set(doc.errors ?? []);
  if (def.auth.kinds !== 'public') errs.add(401).add(403);
  if (doc.body || doc.query || doc.paged || parameters.some((p) => p.in === 'path')) errs.add(400);
  if (parameters.some((p) => p.in === 'path' && p.name !== 'proxyPath')) errs.add(404);
  if (errs.size === 0) errs.add(400);
  for (const e of [...errs].sort()) if (!responses[String(e)]) responses[String(e)] = { $ref: `#/components/responses/E${e}` };
  responses.default = { $ref: '#/components/responses/Error' };

  const op: Json = {
    operationId: doc.operationId ?? operationId(def.method === 'ANY' ? 'any' : def.method, path),
    summary: doc.summary,
    tags: doc.tags,
    security: security(def.auth),
    responses,
  };
  if (doc.description) op.description = doc.description;
  if (parameters.length) op.parameters = parameters;
  if (doc.body) op.requestBody = { required: true, content: { 'application/json': { schema: inputOf(doc.body) } } };
  else if (doc.rawBodyType) op.requestBody = { required: false, content: { [doc.rawBodyType]: { schema: { type: 'string', contentMediaType: doc.rawBodyType } } } };
  return op;
}

/** The shared error responses the operations refer to (Error, and E<status> per status). */
function errorResponses(): Record<string, Json> {
  const responses: Record<string, Json> = { Error: { description: 'Error', content: { 'application/json': { schema: { $ref: uri('Error') } } } } };
  for (const s of [400, 401, 403, 404, 405, 409, 410, 412, 413, 429, 500, 502, 503])
    responses[`E${s}`] = {
      description: STATUS_TEXT[s] as string,
      content: { 'application/json': { schema: { $ref: uri('Error') } } },
      ...(s === 429 || s === 503 ? { headers: { 'Retry-After': { description: 'seconds to wait', schema: { type: 'string' } } } } : {}),
    };
  return responses;
}

/** The webhooks entry of one event: the POST a subscriber receives. */
const webhook = (event: string): Json => ({
  post: {
    operationId: `webhook${event === 'task.completed' ? 'TaskCompleted' : 'TaskFailed'}`,
    summary: `${event} delivery`,
    security: [],
    description:
      'An HTTP POST to the webhook_url of each active webhook subscribed to the event. The X-Webhook-Signature-256 header carries `sha256=` and the hex HMAC-SHA256 of the raw body keyed with the webhook\'s signing_secret; recompute and compare in constant time. A non-2xx answer or a timeout is a failure: retried up to 4 times (immediately, then after 5 s, 30 s, 2 min).',
    parameters: [
      { name: 'X-Webhook-Signature-256', in: 'header', required: true, description: 'sha256= and the hex HMAC-SHA256 of the raw body keyed with the signing_secret', schema: { type: 'string', pattern: '^sha256=[0-9a-f]{64}$' } },
      { name: 'X-Webhook-Event', in: 'header', required: true, description: 'the event_type', schema: { type: 'string', enum: ['task.completed', 'task.failed'] } },
      { name: 'X-Webhook-Delivery', in: 'header', required: true, description: 'the delivery id (the same on every attempt of one delivery)', schema: { type: 'string', format: 'uuid' } },
      { name: 'X-Webhook-Attempt', in: 'header', required: true, description: '1 for the first attempt', schema: { type: 'string' } },
    ],
    requestBody: { required: true, content: { 'application/json': { schema: { $ref: uri('WebhookPayload') } } } },
    responses: { '200': { description: 'Any 2xx acknowledges the delivery' } },
  },
});

/** Builds the document from the routes the edge serves (full paths, as HttpEdge.routes() returns them). */
export function buildOpenApi(routes: ReadonlyArray<RouteDef>, o: OpenApiOptions): Json {
  // one registry conversion for every response schema: named components become $refs, the routes'
  // own schemas are inlined afterwards
  const out = z.registry<{ id: string }>();
  const ids = new Map<z.ZodType, string>();
  for (const [s, id] of NAMED) {
    out.add(s, { id });
    ids.set(s, id);
  }
  const inputs = z.registry<{ id: string }>();
  const inputIds = new Map<z.ZodType, string>();
  let n = 0;
  const outId = (s: z.ZodType): string => {
    let id = ids.get(s);
    if (!id) {
      id = `__r${n++}`;
      ids.set(s, id);
      out.add(s, { id });
    }
    return id;
  };
  const inId = (s: z.ZodType): string => {
    let id = inputIds.get(s);
    if (!id) {
      id = `__i${n++}`;
      inputIds.set(s, id);
      inputs.add(s, { id });
    }
    return id;
  };

  interface Op {
    def: RouteDef;
    doc: RouteDoc;
    path: string;
    relative: boolean;
  }
  const ops: Op[] = [];
  const undocumented: string[] = [];
  for (const def of routes) {
    if (def.doc?.hidden) continue;
    if (!def.doc) {
      undocumented.push(`${def.method} ${def.path}`);
      continue;
    }
    const relative = !def.absolute && def.path.startsWith(`${o.basePath}/`);
    const path = docPath(relative ? def.path.slice(o.basePath.length) : def.path);
    ops.push({ def, doc: def.doc, path, relative });
    for (const r of Object.values(def.doc.responses)) {
      const s = isResponseDoc(r) ? r.schema : r;
      if (s) outId(s);
    }
    if (def.doc.body) inId(def.doc.body);
    if (def.doc.query) inId(def.doc.query);
  }
  const outSchemas = (z.toJSONSchema(out, { target: 'draft-2020-12', io: 'output', unrepresentable: 'any', uri }) as { schemas: Record<string, Json> }).schemas;
  // inputs are inlined whole (named components are not in this registry): what a client sends
  const inSchemas = (z.toJSONSchema(inputs, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any', uri }) as { schemas: Record<string, Json> }).schemas;

  const components: Record<string, Json> = {};
  for (const [id, s] of Object.entries(outSchemas)) if (!id.startsWith('__')) components[id] = clean(s);
  const schemaOf = (s: z.ZodType): Json => {
    const id = ids.get(s) as string;
    return id.startsWith('__') ? clean(outSchemas[id] as Json) : { $ref: uri(id) };
  };
  const inputOf = (s: z.ZodType): Json => clean(inSchemas[inputIds.get(s) as string] as Json);

  const paths: Record<string, Json> = {};
  const tags = new Set<string>();
  for (const { def, doc, path, relative } of ops) {
    const item = (paths[path] ??= {}) as Json;
    if (!relative) item.servers = [{ url: '/', description: 'outside the API base path' }];
    const op = operation(def, doc, path, schemaOf, inputOf);
    for (const t of doc.tags) tags.add(t);
    if (def.method === 'ANY') {
      for (const m of METHODS_OF_ANY) item[m] = { ...op, operationId: `${op.operationId as string}${m[0]!.toUpperCase()}${m.slice(1)}`, 'x-any-method': true };
    } else item[def.method.toLowerCase()] = op;
  }

  void WebhookPayload;

  return {
    openapi: '3.1.0',
    info: {
      title: 'Gantry API',
      version: o.version,
      summary: 'Self-hosted multi-tenant GPU workflow orchestration',
      description:
        'Runtime surface under /r/ (JWT + X-Team-ID, sk- or dk-), management surface (JWT + X-Team-ID or dk-), Server-Sent Events for live task progress and signed webhooks for terminal task events. Errors are `{error_message, error_code}`; lists are `{<name>_list, page_meta}`; runs answer 202 `{task_id}`.',
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    servers: [{ url: o.basePath, description: 'this server' }],
    tags: [...tags].sort().map((name) => ({ name, description: `${name} operations` })),
    paths,
    webhooks: { 'task.completed': webhook('task.completed'), 'task.failed': webhook('task.failed') },
    components: {
      schemas: components,
      responses: errorResponses(),
      securitySchemes: {
        bearerJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'User session JWT from POST /auth/login; team-scoped endpoints also need X-Team-ID' },
        teamId: { type: 'apiKey', in: 'header', name: 'X-Team-ID', description: 'The team a JWT caller acts in (ignored for sk- and dk-)' },
        integrationKey: { type: 'http', scheme: 'bearer', bearerFormat: 'sk-', description: 'Integration credential (team only): runtime surface and MCP' },
        deviceKey: { type: 'http', scheme: 'bearer', bearerFormat: 'dk-', description: 'Device credential from desktop pairing (team and user): runtime and scoped management' },
        agentKey: { type: 'http', scheme: 'bearer', bearerFormat: 'ak-', description: 'Agent credential (agent gRPC stream only)' },
      },
    },
    'x-task-events': Object.fromEntries(Object.entries(TASK_EVENTS).map(([ev, c]) => [ev, { $ref: uri(c) }])),
    ...(undocumented.length ? { 'x-undocumented-routes': undocumented } : {}),
  };
}
