import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { loadConfig } from '../../src/shared/config.js';
import { createLogger } from '../../src/shared/logger.js';
import { startNode, type GantryNode } from '../../src/main.js';
import { checkJsonValue, isCleanString, MAX_JSON_DEPTH } from '../../src/shared/input-hygiene.js';
import { createTestDatabase, type TestDatabase } from '../helpers/pg.js';
import { HttpClient } from '../helpers/node.js';
import { registerUser, createCredential, type TestUser } from '../helpers/identity.js';
import { comfyBody } from '../workflows-api/fixtures.js';

/**
 * Fault 1 of issue 12: a NUL (`\u0000`) or a lone surrogate (`\ud800`) in any JSON string (value or
 * key), a query string or a path parameter reached PostgreSQL and came back as a 500 with an error
 * log line per request. The edge now refuses them once for every request with a 400 naming the
 * field. The node here logs to a capture so the test can prove no error line is written.
 */
let db: TestDatabase;
let dataDir: string;
let node: GantryNode;
let http: HttpClient;
let origin: string;
let owner: TestUser;
let sk: string;
let workflowId: string;
const logLines: Array<{ level: string; msg: string }> = [];

before(async () => {
  db = await createTestDatabase('hygiene');
  dataDir = mkdtempSync(join(tmpdir(), 'gantry-test-'));
  const config = loadConfig(
    {},
    {
      DATABASE_URL: db.url,
      GANTRY_DATA_DIR: dataDir,
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_HTTP_PORT: 0,
      GANTRY_GRPC_HOST: '127.0.0.1',
      GANTRY_GRPC_PORT: 0,
      GANTRY_DB_POOL_MAX: 5,
      GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000,
    },
  );
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (!line) continue;
        try {
          const o = JSON.parse(line) as { level: string; msg: string };
          logLines.push({ level: o.level, msg: o.msg });
        } catch {
          logLines.push({ level: 'unparsed', msg: line });
        }
      }
      cb();
    },
  });
  node = await startNode(config, { logger: createLogger('warn', sink) });
  http = new HttpClient(node.baseUrl);
  origin = `http://127.0.0.1:${node.httpPort}`;
  owner = await registerUser(http);
  sk = (await createCredential(http, owner, 'integration')).value;
  const wf = await http.post('/workflows', comfyBody(), { token: owner.accessToken, team: owner.teamId });
  assert.equal(wf.status, 200, wf.text);
  workflowId = wf.body.id;
});

after(async () => {
  await node.close();
  await db.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

const errorLines = (): Array<{ level: string; msg: string }> => logLines.filter((l) => l.level === 'error' || l.level === 'fatal');

/** Sends a body text verbatim (the JSON escapes stay escapes: `\u0000` is six characters on the wire). */
async function send(method: string, path: string, bodyText: string | undefined, auth: 'none' | 'jwt' | 'sk'): Promise<{ status: number; body: any }> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (auth === 'jwt') Object.assign(headers, { authorization: `Bearer ${owner.accessToken}`, 'x-team-id': owner.teamId });
  if (auth === 'sk') headers.authorization = `Bearer ${sk}`;
  const url = path.startsWith('http') ? path : `${node.baseUrl}${path}`;
  const res = await fetch(url, { method, headers, ...(bodyText === undefined ? {} : { body: bodyText }) });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, body };
}

const BAD = [
  ['NUL', String.raw`a\u0000b`],
  ['lone high surrogate', String.raw`a\ud800b`],
  ['lone low surrogate', String.raw`\udc00`],
] as const;

interface Route {
  method: string;
  /** `{id}` stands for the test workflow's id. */
  path: string;
  auth: 'none' | 'jwt' | 'sk';
  /** Body text with BAD where the bad string goes; field is the path the message must name. */
  body: string;
  field: string;
}

const routes: Route[] = [
  { method: 'POST', path: '/auth/login', auth: 'none', body: `{"email_address":"BAD","password":"x"}`, field: 'email_address' },
  { method: 'POST', path: '/auth/register', auth: 'none', body: `{"email_address":"x@example.test","password":"pw-123456789","first_name":"BAD","last_name":"U"}`, field: 'first_name' },
  { method: 'POST', path: '/r/workflows/{id}/run', auth: 'sk', body: `{"parameters":{"prompt":"BAD"}}`, field: 'parameters.prompt' },
  { method: 'POST', path: '/workflows', auth: 'jwt', body: `{"workflow_slug":"s-x","display_name":"BAD","workflow_json":{}}`, field: 'display_name' },
  { method: 'PUT', path: '/workflows/{id}', auth: 'jwt', body: `{"description":"BAD"}`, field: 'description' },
  { method: 'POST', path: '/webhooks', auth: 'jwt', body: `{"display_name":"BAD","webhook_url":"https://example.com/h","webhook_events":["task.completed"]}`, field: 'display_name' },
  { method: 'POST', path: '/credentials', auth: 'jwt', body: `{"credential_type":"integration","display_name":"BAD"}`, field: 'display_name' },
  { method: 'POST', path: '/teams', auth: 'jwt', body: `{"display_name":"BAD"}`, field: 'display_name' },
  { method: 'PUT', path: '/teams/current', auth: 'jwt', body: `{"display_name":"BAD"}`, field: 'display_name' },
];

describe('NUL and unpaired surrogates are a 400 naming the field, never a 500', () => {
  for (const r of routes)
    for (const [what, bad] of BAD)
      test(`${r.method} ${r.path} ${r.field} with a ${what}`, async () => {
        const before = errorLines().length;
        const res = await send(r.method, r.path.replace('{id}', workflowId), r.body.replace('BAD', bad), r.auth);
        assert.equal(res.status, 400, `${r.method} ${r.path} answered ${res.status} ${JSON.stringify(res.body)}`);
        assert.equal(res.body.error_code, 'invalid_parameter');
        assert.equal(res.body.error_message, `${r.field}: must not contain NUL characters or unpaired surrogates`);
        assert.deepEqual(errorLines().slice(before), [], 'a refused input must not write an error log line');
      });

  test('an object key with a NUL is refused, naming where it is', async () => {
    const res = await send('POST', `/r/workflows/${workflowId}/run`, String.raw`{"parameters":{"pro\u0000mpt":"x"}}`, 'sk');
    assert.equal(res.status, 400, JSON.stringify(res.body));
    assert.equal(res.body.error_code, 'invalid_parameter');
    assert.match(res.body.error_message, /^parameters: field name "pro\\u0000mpt" must not contain NUL characters or unpaired surrogates$/);
  });

  test('a nested array element is named by its index', async () => {
    const res = await send('POST', '/workflows', String.raw`{"workflow_slug":"s-y","display_name":"d","workflow_json":{},"required_labels":["gpu","x\ud800"]}`, 'jwt');
    assert.equal(res.status, 400, JSON.stringify(res.body));
    assert.equal(res.body.error_message, 'required_labels.1: must not contain NUL characters or unpaired surrogates');
  });

  test('a well-formed surrogate pair (an emoji) and other control characters still pass', async () => {
    const res = await send('PUT', '/teams/current', String.raw`{"display_name":"team \ud83d\ude80 \u0001"}`, 'jwt');
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const got = await http.get('/teams/current', { token: owner.accessToken, team: owner.teamId });
    assert.equal(got.body.display_name, 'team \u{1F680} \u0001');
  });

  test('a NUL in a query string value is a 400 naming the parameter', async () => {
    const before = errorLines().length;
    const res = await send('GET', '/models?model_type=a%00b', undefined, 'jwt');
    assert.equal(res.status, 400, JSON.stringify(res.body));
    assert.equal(res.body.error_code, 'invalid_parameter');
    assert.equal(res.body.error_message, 'query parameter model_type: must not contain NUL characters or unpaired surrogates');
    assert.deepEqual(errorLines().slice(before), []);
  });

  test('a NUL in a path parameter is a 400', async () => {
    const res = await send('GET', `/r/workflows/slug/wf%00x`, undefined, 'sk');
    assert.equal(res.status, 400, JSON.stringify(res.body));
    assert.equal(res.body.error_message, 'path parameter workflowSlug: must not contain NUL characters or unpaired surrogates');
  });
});

describe('deep nesting and overflowing numbers', () => {
  test(`a body nested deeper than ${MAX_JSON_DEPTH} levels is a 400, on a public route too`, async () => {
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    for (const [path, body] of [
      ['/auth/login', `{"email_address":${deep},"password":"x"}`],
      [`/r/workflows/${workflowId}/run`, `{"parameters":{"prompt":${deep}}}`],
    ] as const) {
      const res = await send('POST', path, body, path.startsWith('/r/') ? 'sk' : 'none');
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.equal(res.body.error_code, 'invalid_parameter');
      assert.match(res.body.error_message, new RegExp(`nested deeper than ${MAX_JSON_DEPTH} levels$`));
    }
    // exactly the limit still parses (and then fails validation normally, not on depth)
    const ok = await send('POST', '/auth/login', `{"email_address":${'['.repeat(MAX_JSON_DEPTH - 1)}${']'.repeat(MAX_JSON_DEPTH - 1)},"password":"x"}`, 'none');
    assert.equal(ok.status, 400);
    assert.doesNotMatch(ok.body.error_message, /nested deeper/);
  });

  test('a number that overflows to Infinity is a 400 naming the field', async () => {
    const res = await send('PUT', `/workflows/${workflowId}`, '{"task_timeout":1e400}', 'jwt');
    assert.equal(res.status, 400, JSON.stringify(res.body));
    assert.equal(res.body.error_message, 'task_timeout: number out of range');
  });

  test('the node still answers after all of it, and no error line was logged', async () => {
    const h = await fetch(`${origin}/healthz`);
    assert.equal(h.status, 200);
    assert.deepEqual(errorLines(), []);
  });
});

describe('the checker itself', () => {
  test('isCleanString: NUL and unpaired surrogates out, pairs and other text in', () => {
    for (const s of ['\u0000', 'a\u0000', '\ud800', 'x\udfff', '\udc00\ud800', '\ud83d', '\ude80\ud83d']) assert.equal(isCleanString(s), false, JSON.stringify(s));
    for (const s of ['', 'abc', '\u{1F680}', 'é\u0001\u001f\uffff', '\ud83d\ude80\ud83d\ude80']) assert.equal(isCleanString(s), true, JSON.stringify(s));
  });

  test('checkJsonValue names the path and bounds the depth', () => {
    assert.equal(checkJsonValue({ a: [{ b: 'x' }, { c: 'y\u0000' }] })?.message, 'a.1.c: must not contain NUL characters or unpaired surrogates');
    assert.equal(checkJsonValue('\ud800')?.message, 'body: must not contain NUL characters or unpaired surrogates');
    let v: unknown = 1;
    for (let i = 0; i < MAX_JSON_DEPTH; i++) v = [v];
    assert.equal(checkJsonValue(v), null);
    assert.match(checkJsonValue([v])?.message ?? '', /nested deeper than/);
    assert.equal(checkJsonValue(JSON.parse('{"__proto__":{"x":1},"constructor":"x","n":-0,"big":1e308}')), null);
  });
});
