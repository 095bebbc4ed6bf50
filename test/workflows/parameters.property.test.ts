import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { AppError } from '../../src/shared/errors.js';
import { parseWorkflowCreate, type WorkflowDefinition } from '../../src/domain/workflows/schema.js';
import { resolveRunParameters, type StagedFile } from '../../src/domain/workflows/parameters.js';
import { inferType } from '../../src/domain/workflows/values.js';

type Graph = Record<string, { class_type: string; inputs: Record<string, unknown> }>;
const loadGraph = (name: string): Graph => JSON.parse(readFileSync(new URL(`../fixtures/comfy/${name}.json`, import.meta.url), 'utf8')) as Graph;

const TEAM = 'team-a';
/** fast-check builds null-prototype objects; a JSON round trip makes them what JSON.parse gives the service. */
const plain = <T,>(v: T): T => (v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T));
const NOW = 1_700_000_000_000;
const RUNS = { numRuns: 200 };

function resolve(def: WorkflowDefinition, input: unknown, files: StagedFile[] = []): ReturnType<typeof resolveRunParameters> {
  return resolveRunParameters({
    toolType: def.tool_type,
    workflowJson: def.workflow_json,
    parameters: def.parameters,
    input,
    files: new Map(files.map((f) => [f.fileKey, f])),
    teamId: TEAM,
    now: NOW,
  });
}

// ---------------------------------------------------------------------------------------------
// (a) random graphs, random parameter definitions, random valid inputs
// ---------------------------------------------------------------------------------------------

const scalar = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.integer({ min: -1_000_000, max: 1_000_000 }),
  fc.double({ min: -1_000_000, max: 1_000_000, noNaN: true }),
  fc.boolean(),
);

const graphArb: fc.Arbitrary<Graph> = fc
  .uniqueArray(
    fc.tuple(fc.integer({ min: 1, max: 999 }), fc.option(fc.integer({ min: 0, max: 9 }), { nil: undefined })).map(([a, b]) => (b === undefined ? String(a) : `${a}:${b}`)),
    { minLength: 1, maxLength: 8 },
  )
  .chain((ids) =>
    fc
      .tuple(
        ...ids.map((_, idx) =>
          fc.record({
            class_type: fc.constantFrom('KSampler', 'CLIPTextEncode', 'SaveImage', 'LoadImage', 'Custom Node'),
            inputs: fc.dictionary(
              fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz_'), minLength: 1, maxLength: 8 }),
              idx > 0 ? fc.oneof(scalar, fc.tuple(fc.constantFrom(...ids.slice(0, idx)), fc.nat(3))) : scalar,
              { maxKeys: 5 },
            ),
          }),
        ),
      )
      .map((nodes) => plain(Object.fromEntries(ids.map((id, i) => [id, nodes[i]!])) as Graph)),
  );

interface Slot {
  nodeId: string;
  field: string;
  current: unknown;
}

interface Case {
  def: WorkflowDefinition;
  input: Record<string, unknown>;
}

/** A parameter definition for one slot plus an arbitrary of valid values for it. */
function paramFor(slot: Slot, key: string): fc.Arbitrary<{ def: Record<string, unknown>; value: fc.Arbitrary<unknown> }> {
  const v = slot.current;
  const t = inferType(v);
  const common = fc.record({ required: fc.boolean(), withDefault: fc.boolean(), asJson: fc.boolean() });
  const base = { key, node_id: slot.nodeId, field: slot.field };
  if (t === 'integer' || t === 'number') {
    const n = v as number;
    return fc.record({ c: common, lo: fc.nat(1000), hi: fc.nat(1000), bounded: fc.boolean(), asNumber: fc.boolean() }).map(({ c, lo, hi, bounded, asNumber }) => {
      const type = t === 'integer' && asNumber ? 'number' : t;
      const min = n - lo;
      const max = n + hi;
      const def = { ...base, type, required: c.required, ...(bounded ? { min, max } : {}), ...(c.withDefault ? { default: n } : {}) };
      const [a, b] = bounded ? [min, max] : [-1e9, 1e9];
      const value = type === 'integer' ? fc.integer({ min: Math.ceil(a), max: Math.floor(b) }) : fc.double({ min: a, max: b, noNaN: true });
      return { def, value };
    });
  }
  if (t === 'string') {
    return fc.record({ c: common, extra: fc.uniqueArray(fc.string({ maxLength: 8 }), { maxLength: 4 }), withOptions: fc.boolean() }).map(({ c, extra, withOptions }) => {
      const options = [...new Set([v as string, ...extra])];
      if (c.asJson) return { def: { ...base, type: 'json', required: c.required }, value: fc.oneof(fc.string(), fc.integer(), fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 3 })).map(plain) };
      const def = { ...base, required: c.required, ...(withOptions ? { options } : {}), ...(c.withDefault ? { default: v } : {}) };
      return { def, value: withOptions ? fc.constantFrom(...options) : fc.string({ maxLength: 20 }) };
    });
  }
  // boolean
  return common.map((c) => ({ def: { ...base, required: c.required, ...(c.withDefault ? { default: v } : {}) }, value: fc.boolean() as fc.Arbitrary<unknown> }));
}

const caseArb: fc.Arbitrary<Case> = graphArb.chain((graph) => {
  const slots: Slot[] = [];
  for (const [nodeId, node] of Object.entries(graph)) {
    for (const [field, current] of Object.entries(node.inputs)) if (!Array.isArray(current)) slots.push({ nodeId, field, current });
  }
  return fc.subarray(slots).chain((chosen) =>
    fc.tuple(...chosen.map((s, i) => paramFor(s, `p${i}`))).chain((params) => {
      const def = parseWorkflowCreate({ workflow_slug: 'prop', display_name: 'prop', workflow_json: graph, parameters: params.map((p) => p.def) });
      const entries = params.map((p, i) => {
        const required = p.def['required'] === true && !('default' in p.def);
        return (required ? p.value : fc.option(p.value, { nil: undefined })).map((v) => [`p${i}`, v] as const);
      });
      return fc.tuple(...entries).map((kv) => ({
        def,
        input: Object.fromEntries(kv.filter(([, v]) => v !== undefined)),
      }));
    }),
  );
});

describe('property: injection changes only declared targets', () => {
  it('random graphs and valid inputs', () => {
    fc.assert(
      fc.property(caseArb, ({ def, input }) => {
        const stored = structuredClone(def.workflow_json);
        const r = resolve(def, input);
        const expected = structuredClone(stored) as Graph;
        for (const p of def.parameters) {
          const given = Object.hasOwn(input, p.key);
          const value = given ? input[p.key] : p.default;
          if (value === undefined) {
            assert.equal(Object.hasOwn(r.values, p.key), false);
            continue;
          }
          assert.deepEqual(r.values[p.key], value);
          expected[p.node_id!]!.inputs[p.field!] = value;
        }
        assert.deepEqual(r.workflow, expected);
        assert.deepEqual(def.workflow_json, stored, 'stored graph unchanged');
      }),
      RUNS,
    );
  });

  it('nerfstudio: only the target paths change', () => {
    const def = parseWorkflowCreate({
      workflow_slug: 'splat',
      display_name: 'splat',
      tool_type: 'nerfstudio',
      workflow_json: { method: 'nerfacto', data: { source: 'url', url: 'https://example.com/scan.zip' }, train: { max_num_iterations: 30000, seed: 1 }, export: { format: 'pointcloud' } },
      parameters: [
        { key: 'iters', target_path: 'train.max_num_iterations', min: 100, max: 100000 },
        { key: 'points', type: 'integer', target_path: 'export.num_points', min: 1, max: 10_000_000 },
        { key: 'flag', type: 'boolean', target_path: 'train.extra_args.verbose' },
        { key: 'method', target_path: 'method', options: ['nerfacto', 'nerfacto-big'] },
      ],
    });
    const inputArb = fc.record(
      {
        iters: fc.integer({ min: 100, max: 100000 }),
        points: fc.integer({ min: 1, max: 10_000_000 }),
        flag: fc.boolean(),
        method: fc.constantFrom('nerfacto', 'nerfacto-big'),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(inputArb, (input) => {
        const stored = structuredClone(def.workflow_json);
        const spec = resolve(def, input).workflow as Record<string, Record<string, unknown>>;
        const expected = structuredClone(stored) as Record<string, Record<string, unknown>>;
        if (input.iters !== undefined) expected['train']!['max_num_iterations'] = input.iters;
        if (input.points !== undefined) expected['export']!['num_points'] = input.points;
        if (input.flag !== undefined) expected['train']!['extra_args'] = { verbose: input.flag };
        if (input.method !== undefined) expected['method'] = input.method as never;
        assert.deepEqual(spec, expected);
        assert.deepEqual(def.workflow_json, stored);
      }),
      RUNS,
    );
  });
});

// ---------------------------------------------------------------------------------------------
// (b) invalid values always give 400 naming the parameter
// ---------------------------------------------------------------------------------------------

const txt2img = parseWorkflowCreate({
  workflow_slug: 'txt2img',
  display_name: 'txt2img',
  workflow_json: loadGraph('txt2img'),
  parameters: [
    { key: 'prompt', node_id: '6', field: 'text', required: true },
    { key: 'seed', node_id: '3', field: 'seed', min: 0, max: 2 ** 32 - 1 },
    { key: 'steps', node_id: '3', field: 'steps', min: 1, max: 150, default: 20 },
    { key: 'cfg', node_id: '3', field: 'cfg', type: 'number', min: 0, max: 30 },
    { key: 'sampler', node_id: '3', field: 'sampler_name', options: ['euler', 'euler_ancestral', 'dpmpp_2m'] },
    { key: 'hires', node_id: '9', field: 'filename_prefix', type: 'boolean' },
  ],
});
const img2img = parseWorkflowCreate({
  workflow_slug: 'img2img',
  display_name: 'img2img',
  workflow_json: loadGraph('img2img'),
  parameters: [{ key: 'image', node_id: '10', field: 'image', type: 'file', required: true, accept: ['image/png', '.jpg'] }],
});
const KNOWN = new Set(txt2img.parameters.map((p) => p.key));
const STAGED: StagedFile[] = [
  { fileKey: 'ok', teamId: TEAM, contentType: 'image/png', fileName: 'a.png', expiresAt: NOW + 1000 },
  { fileKey: 'gif', teamId: TEAM, contentType: 'image/gif', fileName: 'a.gif', expiresAt: NOW + 1000 },
  { fileKey: 'old', teamId: TEAM, contentType: 'image/png', fileName: 'a.png', expiresAt: NOW - 1 },
  { fileKey: 'theirs', teamId: 'team-b', contentType: 'image/png', fileName: 'a.png', expiresAt: NOW + 1000 },
];

const notNumber = fc.oneof(fc.string(), fc.boolean(), fc.constant(null), fc.array(fc.integer(), { maxLength: 3 }), fc.dictionary(fc.string(), fc.integer(), { maxKeys: 3 }));
const notString = fc.oneof(fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.array(fc.string(), { maxLength: 3 }), fc.object({ maxDepth: 1 }));
const nonInteger = fc.double({ min: 1, max: 150, noNaN: true }).filter((x) => !Number.isInteger(x));

interface BadCase {
  def: WorkflowDefinition;
  key: string;
  input: Record<string, unknown>;
}
const t2i = (key: string, value: unknown): BadCase => ({ def: txt2img, key, input: { prompt: 'a fox', [key]: value } });

const badArb: fc.Arbitrary<BadCase> = fc.oneof(
  fc.oneof(fc.integer({ min: -1e9, max: 0 }), fc.integer({ min: 151, max: 1e9 })).map((v) => t2i('steps', v)),
  nonInteger.map((v) => t2i('steps', v)),
  fc.oneof(fc.integer({ min: -1e9, max: -1 }), fc.integer({ min: 2 ** 32, max: Number.MAX_SAFE_INTEGER })).map((v) => t2i('seed', v)),
  fc.oneof(fc.double({ min: -1e9, max: -Number.MIN_VALUE, noNaN: true }), fc.double({ min: 30.000001, max: 1e9, noNaN: true })).map((v) => t2i('cfg', v)),
  fc.tuple(fc.constantFrom('seed', 'steps', 'cfg'), notNumber).map(([k, v]) => t2i(k, v)),
  notString.map((v) => ({ def: txt2img, key: 'prompt', input: { prompt: v } })),
  fc.string().filter((s) => !['euler', 'euler_ancestral', 'dpmpp_2m'].includes(s)).map((v) => t2i('sampler', v)),
  notString.map((v) => t2i('sampler', v)),
  fc.oneof(fc.string(), fc.integer(), fc.constant(null)).map((v) => t2i('hires', v)),
  fc
    .tuple(fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_.-]{0,20}$/).filter((k) => !KNOWN.has(k)), fc.jsonValue())
    .map(([k, v]) => ({ def: txt2img, key: k, input: { prompt: 'a fox', [k]: v } })),
  fc.constantFrom('missing', 'gif', 'old', 'theirs').map((v) => ({ def: img2img, key: 'image', input: { image: v } })),
  notString.map((v) => ({ def: img2img, key: 'image', input: { image: v } })),
);

describe('property: invalid values are 400 naming the parameter', () => {
  it('out of range, wrong type, not in options, unknown key, bad file', () => {
    fc.assert(
      fc.property(badArb, ({ def, key, input }) => {
        const stored = structuredClone(def.workflow_json);
        let caught: unknown;
        try {
          resolve(def, input, STAGED);
        } catch (e) {
          caught = e;
        }
        assert.ok(caught instanceof AppError, `expected AppError for ${key}=${JSON.stringify(input[key])}`);
        assert.equal(caught.kind, 'bad_request');
        assert.equal(caught.code, 'invalid_parameter');
        assert.ok(caught.message.startsWith(`parameters.${key}: `), `message ${JSON.stringify(caught.message)} does not name ${key}`);
        assert.deepEqual(def.workflow_json, stored);
      }),
      { numRuns: 400 },
    );
  });

  it('arbitrary input never crashes: success or a 400', () => {
    fc.assert(
      fc.property(fc.oneof(fc.anything(), fc.dictionary(fc.constantFrom('prompt', 'seed', 'steps', 'cfg', 'sampler', 'hires', 'x'), fc.anything())), (input) => {
        try {
          resolve(txt2img, input, STAGED);
        } catch (e) {
          assert.ok(e instanceof AppError && e.kind === 'bad_request', `unexpected ${String(e)}`);
        }
      }),
      RUNS,
    );
  });
});
