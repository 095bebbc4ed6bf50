import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, type TestUser } from '../helpers/identity.js';
import type { RouteDef } from '../../src/edge/http.js';
import { comfyBody } from '../workflows-api/fixtures.js';

/**
 * Hostile bodies against every registered POST/PUT/PATCH JSON route of a real node
 * (t.node.routes(), so routes added later are fuzzed automatically): arbitrary JSON mixed with NUL,
 * lone surrogates, deep nesting, huge and odd numbers (1e308, 1e400, -0, big integers), prototype
 * keys (`__proto__`, `constructor`, duplicates), long strings, wrong types, and known-good bodies
 * with one field replaced by such a value. Every route is called with a credential it accepts (an
 * owner JWT with X-Team-ID, an sk- where only those are allowed), with real ids in the path where
 * the test has them. Invariant: no response is a 5xx, and the node still answers /healthz.
 * Reproduce a run with FUZZ_SEED=<seed printed on failure>; FUZZ_BODIES sets the total.
 */
const TOTAL = Number(process.env.FUZZ_BODIES ?? 10_000);
const CONCURRENCY = 8;
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);

let t: TestNode;
let owner: TestUser;
let throwaway: TestUser;
let sk: string;
let ids: Record<string, string>;

before(async () => {
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'fuzz');
  owner = await registerUser(t.http);
  throwaway = await registerUser(t.http);
  sk = (await createCredential(t.http, owner, 'integration')).value;
  const as = { token: owner.accessToken, team: owner.teamId };
  const wf = comfyBody();
  const w = await t.http.post('/workflows', wf, as);
  assert.equal(w.status, 200, w.text);
  const h = await t.http.post('/webhooks', { display_name: 'fuzz', webhook_url: 'https://127.0.0.1:9/hook', webhook_events: ['task.completed'] }, as);
  assert.equal(h.status, 200, h.text);
  const run = await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { prompt: 'a cat' } }, { token: sk });
  assert.equal(run.status, 202, run.text);
  ids = { workflowId: w.body.id, workflowSlug: wf.workflow_slug, webhookId: h.body.id, taskId: run.body.task_id };
});
after(async () => {
  await t?.stop();
});

// ---- JSON text with what JSON.stringify cannot express (raw number literals, duplicate or __proto__ keys)

class Raw {
  constructor(readonly text: string) {}
}
class Obj {
  constructor(readonly entries: Array<[string, J]>) {}
}
type J = null | boolean | number | string | Raw | Obj | J[];

function toText(v: J): string {
  if (v instanceof Raw) return v.text;
  if (v instanceof Obj) return `{${v.entries.map(([k, x]) => `${JSON.stringify(k)}:${toText(x)}`).join(',')}}`;
  if (Array.isArray(v)) return `[${v.map(toText).join(',')}]`;
  return JSON.stringify(v);
}

const fromPlain = (v: unknown): J => {
  if (Array.isArray(v)) return v.map(fromPlain);
  if (v !== null && typeof v === 'object') return new Obj(Object.entries(v).map(([k, x]) => [k, fromPlain(x)]));
  return v as J;
};

// ---- hostile pieces

const badChar = fc.constantFrom('\u0000', '\ud800', '\udbff', '\udc00', '\udfff', '\ud83d\ude80', '\u0001', '\u001f', '\u2028', '\ufeff', '\uffff', '\\', '"', "'", '%00', '\r\n');
const hostileString: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(fc.string({ maxLength: 12 }), badChar, fc.string({ maxLength: 12 })).map(([a, b, c]) => a + b + c),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: fc.constantFrom('a', '\u0000', '\ud800', '\udc00', 'é', '/', '.'), maxLength: 30 }),
  fc.constantFrom('', ' ', '.', '..', '../../etc/passwd', 'a'.repeat(10_000), 'x'.repeat(300), 'https://127.0.0.1/x', 'javascript:alert(1)', '${x}', "'; drop table users; --", '0', 'true', 'null'),
  fc.integer({ min: 1000, max: 200_000 }).map((n) => 'é'.repeat(n)),
  fc.uuid(),
);
const hostileNumber: fc.Arbitrary<J> = fc.oneof(
  fc.constantFrom<J>(new Raw('1e308'), new Raw('-1e308'), new Raw('1e400'), new Raw('-1e400'), new Raw('-0'), new Raw('0.0'), new Raw('1e-400'), new Raw('123456789012345678901234567890'), new Raw('-9223372036854775809'), new Raw('9007199254740993'), new Raw('2147483648'), new Raw('4.5'), new Raw('1E2')),
  fc.double().filter(Number.isFinite),
  fc.integer(),
  fc.bigInt({ min: -(2n ** 80n), max: 2n ** 80n }).map((b) => new Raw(b.toString())),
);
const deepValue: fc.Arbitrary<J> = fc.tuple(fc.integer({ min: 10, max: 5_000 }), fc.constantFrom('[', '{"a":')).map(([n, open]) => new Raw(open.repeat(n) + '1' + (open === '[' ? ']' : '}').repeat(n)));
const protoKey = fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__');

const leaf: fc.Arbitrary<J> = fc.oneof(hostileString, hostileNumber, fc.boolean(), fc.constant(null));

const hostile: fc.Arbitrary<J> = fc.letrec<{ v: J }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    deepValue,
    fc.array(tie('v'), { maxLength: 4 }),
    fc.array(fc.tuple(fc.oneof(protoKey, hostileString, fc.constantFrom('a', 'id', 'type')), tie('v')), { maxLength: 4 }).map((e) => new Obj(e)),
    fc.tuple(protoKey, fc.jsonValue({ maxDepth: 2 })).map(([k, x]) => new Obj([[k, fromPlain(x)]])),
  ),
})).v;

/** Bodies a route should accept, so hostile values reach past the first validation step. */
function templates(path: string): Array<Record<string, unknown>> {
  const p = path.replace('/api/v1', '');
  const wf = comfyBody();
  const byPath: Record<string, Array<Record<string, unknown>>> = {
    '/workflows': [wf],
    '/workflows/import': [{ workflow_json: wf.workflow_json, display_name: 'imp' }],
    '/workflows/{workflowId}': [{ description: 'x', parameters: wf.parameters, workflow_json: wf.workflow_json }],
    '/r/workflows/{workflowId}/run': [{ parameters: { prompt: 'a', steps: 20, sampler: 'euler' } }, { parameters: { prompt: 'a' }, dispatch_target: 'agent' }],
    '/r/workflows/slug/{workflowSlug}/run': [{ parameters: { prompt: 'a' } }],
    '/r/files/presign': [{ file_name: 'a.png', content_type: 'image/png', size_bytes: 10 }],
    '/models': [{ display_name: 'm', model_path: 'checkpoints/a.safetensors', model_type: 'checkpoint' }],
    '/models/{modelId}': [{ display_name: 'm' }],
    '/nodes': [{ display_name: 'n' }],
    '/auth/register': [{ email_address: 'fuzz@example.test', password: 'pw-1234567890', first_name: 'F', last_name: 'Z' }],
    '/auth/login': [{ email_address: owner.email, password: 'wrong-password' }],
    '/auth/refresh': [{ refresh_token: 'rt' }],
    '/auth/logout': [{ refresh_token: 'rt' }],
    '/auth/password/forgot': [{ email_address: 'nobody@example.test' }],
    '/auth/password/reset': [{ token: 'x', new_password: 'pw-1234567890' }],
    '/auth/email/verify': [{ token: 'x' }],
    '/desktop/pair/start': [{ device_name: 'd' }],
    '/desktop/pair/confirm': [{ user_code: 'ABCD-EFGH' }],
    '/desktop/pair/poll': [{ pairing_id: randomUUID(), poll_secret: 'x' }],
    '/credentials': [{ credential_type: 'integration', display_name: 'c', expires_in_days: 1 }],
    '/teams': [{ display_name: 't' }],
    '/teams/current': [{ display_name: 't' }],
    '/teams/current/members/{userId}': [{ member_role: 'admin' }],
    '/teams/current/invitations': [{ email_address: 'inv@example.test', member_role: 'member' }],
    '/invitations/accept': [{ token: 'x' }],
    '/webhooks': [{ display_name: 'w', webhook_url: 'https://127.0.0.1:9/x', webhook_events: ['task.completed'] }],
    '/webhooks/{webhookId}': [{ display_name: 'w', webhook_events: ['task.completed'], is_active: false }],
  };
  return byPath[p] ?? [{}];
}

/** Every place in a template a value can go: each existing leaf or object (replace), each object (add a key). */
type Slot = { path: Array<string | number>; add: boolean };
function slots(v: unknown, path: Array<string | number> = []): Slot[] {
  const out: Slot[] = path.length ? [{ path, add: false }] : [];
  if (Array.isArray(v)) v.forEach((x, i) => out.push(...slots(x, [...path, i])));
  else if (v !== null && typeof v === 'object') {
    out.push({ path, add: true });
    for (const [k, x] of Object.entries(v)) out.push(...slots(x, [...path, k]));
  }
  return out;
}

/** The template with `value` put at the slot (replacing a value, or as an extra key when add). */
function place(tpl: unknown, slot: Slot, key: string, value: J): J {
  const go = (v: unknown, depth: number): J => {
    const here = depth === slot.path.length;
    if (here && !slot.add) return value;
    if (Array.isArray(v)) return v.map((x, i) => (i === slot.path[depth] ? go(x, depth + 1) : fromPlain(x)));
    if (v !== null && typeof v === 'object') {
      const entries: Array<[string, J]> = Object.entries(v).map(([k, x]) => [k, k === slot.path[depth] && !here ? go(x, depth + 1) : fromPlain(x)]);
      if (here) entries.push([key, value]);
      return new Obj(entries);
    }
    return fromPlain(v);
  };
  return go(tpl, 0);
}

/** A string that must be refused: a NUL or an unpaired surrogate somewhere in otherwise plain text. */
const refusedString = fc.tuple(fc.string({ maxLength: 8 }), fc.constantFrom('\u0000', '\ud800', '\udbff', '\udc00', '\udfff', '\u0000\u0000', '\udc00\ud800'), fc.string({ maxLength: 8 })).map(([a, b, c]) => a + b + c);

/**
 * One body: mostly a known-good template with one value anywhere in it (nested too: run
 * parameters, workflow nodes) replaced by, or added as, a hostile value; sometimes a hostile
 * value or arbitrary JSON as the whole body.
 */
function bodyArb(path: string): fc.Arbitrary<string> {
  const tpls = templates(path);
  const value: fc.Arbitrary<J> = fc.oneof(
    { weight: 4, arbitrary: refusedString },
    { weight: 3, arbitrary: hostileString },
    { weight: 3, arbitrary: hostileNumber },
    { weight: 1, arbitrary: deepValue },
    { weight: 2, arbitrary: hostile },
  );
  const mutated = fc
    .constantFrom(...tpls)
    .chain((tpl) => fc.tuple(fc.constant(tpl), fc.constantFrom(...(slots(tpl).length ? slots(tpl) : [{ path: [], add: true }])), fc.oneof(protoKey, refusedString, hostileString, fc.constantFrom('extra', 'id', 'team_id')), value))
    .map(([tpl, slot, key, v]) => toText(place(tpl, slot, key, v)));
  return fc.oneof({ weight: 6, arbitrary: mutated }, { weight: 1, arbitrary: hostile.map(toText) }, { weight: 1, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) });
}

// ---- calling

function concretePath(path: string): string {
  return path.replace(/\{(\w+)\}/g, (_m, name: string) => encodeURIComponent(ids[name] ?? randomUUID()));
}

function headersFor(def: RouteDef): Record<string, string> {
  const a = def.auth;
  if (a.kinds === 'public') return {};
  // logout ends the caller's session: a throwaway user's, so the others stay usable
  if (def.path.endsWith('/auth/logout')) return { authorization: `Bearer ${throwaway.accessToken}` };
  if (a.kinds.includes('user')) return { authorization: `Bearer ${owner.accessToken}`, 'x-team-id': owner.teamId };
  if (a.kinds.includes('integration')) return { authorization: `Bearer ${sk}` };
  return { authorization: `Bearer ${sk}` };
}

interface Failure {
  route: string;
  status: number;
  body: string;
  response: string;
}

async function send(def: RouteDef, body: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${t.origin}${concretePath(def.path)}`, { method: def.method, headers: { 'content-type': 'application/json', ...headersFor(def) }, body });
  return { status: res.status, text: await res.text() };
}

test(`${TOTAL} hostile bodies over every POST/PUT/PATCH route: no 5xx, node still healthy`, { timeout: 240_000 }, async () => {
  const routes = t.node.routes().filter((d) => (d.method === 'POST' || d.method === 'PUT' || d.method === 'PATCH') && !d.stream && !d.rawBody);
  assert.ok(routes.length >= 30, `expected the JSON write routes (got ${routes.length})`);
  // password hashing routes (register, login, reset) are costlier: fewer bodies there, the rest spread evenly
  const costly = (d: RouteDef): boolean => /\/auth\/(register|login|password\/reset)$/.test(d.path);
  const nCostly = routes.filter(costly).length;
  const perCostly = Math.min(100, Math.floor(TOTAL / routes.length));
  const perRoute = Math.ceil((TOTAL - perCostly * nCostly) / (routes.length - nCostly));
  const jobs: Array<{ def: RouteDef; body: string }> = [];
  for (const [i, def] of routes.entries()) {
    const n = costly(def) ? perCostly : perRoute;
    for (const body of fc.sample(bodyArb(def.path), { numRuns: n, seed: SEED + i })) jobs.push({ def, body });
  }
  // interleave routes so a slow route never serialises the run
  const order = jobs.map((_, i) => i).sort((a, b) => (a % 97) - (b % 97) || a - b);

  const failures: Failure[] = [];
  const statuses = new Map<number, number>();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < order.length) {
      const job = jobs[order[next++] as number] as { def: RouteDef; body: string };
      const r = await send(job.def, job.body);
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      if (r.status >= 500) failures.push({ route: `${job.def.method} ${job.def.path}`, status: r.status, body: job.body.slice(0, 300), response: r.text.slice(0, 300) });
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));

  const sent = [...statuses.values()].reduce((a, b) => a + b, 0);
  assert.ok(sent >= TOTAL, `sent ${sent} bodies, expected at least ${TOTAL}`);
  const byRoute = new Map<string, Failure[]>();
  for (const f of failures) byRoute.set(f.route, [...(byRoute.get(f.route) ?? []), f]);
  assert.deepEqual(
    [...byRoute.entries()].map(([route, fs]) => ({ route, count: fs.length, first: fs[0] })),
    [],
    `5xx answers (FUZZ_SEED=${SEED}); statuses ${JSON.stringify(Object.fromEntries(statuses))}`,
  );
  // not a tautology: a share of the bodies got past validation into the handlers and the database
  const accepted = [...statuses.entries()].filter(([s]) => s >= 200 && s < 300).reduce((a, [, n]) => a + n, 0);
  assert.ok(accepted >= TOTAL / 100, `only ${accepted} of ${sent} bodies were accepted; the generator no longer reaches the handlers`);
  const health = await fetch(`${t.origin}/healthz`);
  assert.equal(health.status, 200);
  // the caller's credentials still work: the run did not wedge the node or its pool
  assert.equal((await t.http.get('/teams/current', { token: owner.accessToken, team: owner.teamId })).status, 200);
});
