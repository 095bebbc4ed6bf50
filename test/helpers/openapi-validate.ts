/**
 * Checks real responses against the OpenAPI document of the node that sent them: every
 * HttpClient (test/helpers/node.ts) response to a documented route must have a documented status
 * (2xx: listed for the route; errors: listed or the `default` error envelope), and its JSON body
 * must validate (ajv, JSON Schema 2020-12) against the documented schema. A mismatch throws, so
 * every integration test that talks HTTP through HttpClient checks the document too.
 * GANTRY_TEST_VALIDATE_RESPONSES=0 turns it off.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { Router } from '../../src/edge/router.js';

type Json = Record<string, any>;
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => void;

interface Op {
  path: string;
  method: string;
  responses: Record<string, Json>;
}

export class ResponseValidator {
  private readonly router = new Router<Map<string, Op>>();
  private readonly ajv: Ajv2020;
  private readonly compiled = new Map<Json, ValidateFunction>();

  constructor(private readonly doc: Json) {
    this.ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
    addFormats(this.ajv);
    this.ajv.addSchema({ $id: 'gantry-doc', components: { schemas: doc.components.schemas } });
    const base = (doc.servers?.[0]?.url as string | undefined) ?? '';
    for (const [p, item] of Object.entries(doc.paths as Record<string, Json>)) {
      const full = (item.servers ? p : `${base}${p}`).replace(/\/\{proxyPath\}$/, '/*');
      const ops = new Map<string, Op>();
      for (const m of ['get', 'put', 'post', 'delete', 'patch', 'head', 'options']) if (item[m]) ops.set(m.toUpperCase(), { path: p, method: m, responses: item[m].responses });
      try {
        this.router.add('ANY', full, ops);
      } catch {
        // the same template twice (ANY-expanded): the first wins
      }
    }
  }

  private resolve(r: Json): Json {
    if (typeof r.$ref === 'string' && r.$ref.startsWith('#/components/responses/')) return this.doc.components.responses[r.$ref.slice('#/components/responses/'.length)];
    return r;
  }

  private validator(schema: Json): ValidateFunction {
    let v = this.compiled.get(schema);
    if (!v) {
      v = this.ajv.compile(JSON.parse(JSON.stringify(schema).replaceAll('"#/components/schemas/', '"gantry-doc#/components/schemas/')) as Json);
      this.compiled.set(schema, v);
    }
    return v;
  }

  /** null when value matches the named component schema (e.g. TaskEventProgress, WebhookPayload); else why not. */
  checkComponent(name: string, value: unknown): string | null {
    if (!this.doc.components.schemas[name]) return `no component ${name}`;
    const v = this.validator({ $ref: `#/components/schemas/${name}` });
    return v(value) ? null : `${name}: ${this.ajv.errorsText(v.errors, { separator: '; ' })}; value ${JSON.stringify(value).slice(0, 400)}`;
  }

  /** null when the response matches the document (or the route is not documented); else why not. */
  check(method: string, fullPath: string, status: number, contentType: string, body: unknown): string | null {
    const m = this.router.find('ANY', fullPath);
    if (m === null || m === 'method_not_allowed') return null;
    const op = m.route.get(method === 'HEAD' ? 'GET' : method) ?? m.route.get(method);
    if (!op) return null;
    const where = `${method} ${op.path} -> ${status}`;
    const listed = op.responses[String(status)];
    let resp: Json | undefined = listed ? this.resolve(listed) : undefined;
    if (!resp) {
      if (status < 400) return `${where}: status not documented (documented: ${Object.keys(op.responses).join(', ')})`;
      resp = this.resolve(op.responses.default ?? {});
    }
    if (!contentType.includes('json') || body === undefined || typeof body === 'string') return null;
    const schema = resp?.content?.['application/json']?.schema as Json | undefined;
    if (!schema) return null;
    const v = this.validator(schema);
    if (v(body)) return null;
    return `${where}: body does not match the documented schema: ${this.ajv.errorsText(v.errors, { separator: '; ' })}; body ${JSON.stringify(body).slice(0, 400)}`;
  }
}

const byBase = new Map<string, Promise<ResponseValidator | null>>();

/** The validator for the node at baseUrl (its document fetched once); null when validation is off or the node serves none. */
export function validatorFor(baseUrl: string): Promise<ResponseValidator | null> {
  if (process.env.GANTRY_TEST_VALIDATE_RESPONSES === '0') return Promise.resolve(null);
  let p = byBase.get(baseUrl);
  if (!p) {
    p = fetch(`${baseUrl}/openapi.json`)
      .then(async (r) => (r.ok ? new ResponseValidator((await r.json()) as Json) : null))
      .catch(() => null);
    byBase.set(baseUrl, p);
  }
  return p;
}
