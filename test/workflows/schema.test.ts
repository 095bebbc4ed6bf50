import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { AppError } from '../../src/shared/errors.js';
import {
  mergeWorkflowUpdate,
  modelPathSchema,
  parseWorkflowCreate,
  parseWorkflowUpdate,
  validateWorkflowDefinition,
  workflowCreateSchema,
  type WorkflowDefinition,
} from '../../src/domain/workflows/schema.js';
import { validateComfyGraph } from '../../src/domain/workflows/comfy.js';

const loadGraph = (name: string): Record<string, unknown> =>
  JSON.parse(readFileSync(new URL(`../fixtures/comfy/${name}.json`, import.meta.url), 'utf8')) as Record<string, unknown>;
const txt2img = loadGraph('txt2img');
const img2img = loadGraph('img2img');

const base = (over: Record<string, unknown> = {}): Record<string, unknown> => ({
  workflow_slug: 'sd15-txt2img',
  display_name: 'SD 1.5 txt2img',
  workflow_json: structuredClone(txt2img),
  ...over,
});

/** Asserts a 400 invalid_parameter whose message matches (regex or substring). */
function rejects(fn: () => unknown, expected: RegExp | string): AppError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof AppError, `expected an AppError, got ${String(caught)}`);
  assert.equal(caught.kind, 'bad_request');
  assert.equal(caught.code, 'invalid_parameter');
  if (typeof expected === 'string') assert.ok(caught.message.includes(expected), `message ${JSON.stringify(caught.message)} lacks ${JSON.stringify(expected)}`);
  else assert.match(caught.message, expected);
  return caught;
}
const ok = (over: Record<string, unknown>): WorkflowDefinition => parseWorkflowCreate(base(over));
const bad = (over: Record<string, unknown>, expected: RegExp | string): AppError => rejects(() => parseWorkflowCreate(base(over)), expected);

describe('workflow create: field boundaries', () => {
  it('applies defaults', () => {
    const d = ok({});
    assert.equal(d.tool_type, 'comfyui');
    assert.equal(d.default_dispatch_target, 'agent');
    assert.equal(d.task_timeout, 0);
    assert.equal(d.max_retries, 0);
    assert.equal(d.min_vram_gb, 0);
    assert.deepEqual(d.parameters, []);
    assert.deepEqual(d.required_labels, []);
    assert.deepEqual(d.required_models, []);
    assert.equal('description' in d, false);
    assert.equal('preferred_gpu' in d, false);
  });

  it('workflow_slug: 1 vs 2 chars, 100 vs 101 chars', () => {
    bad({ workflow_slug: 'a' }, /^workflow_slug: /);
    assert.equal(ok({ workflow_slug: 'ab' }).workflow_slug, 'ab');
    assert.equal(ok({ workflow_slug: 'a'.repeat(100) }).workflow_slug.length, 100);
    bad({ workflow_slug: 'a'.repeat(101) }, /^workflow_slug: /);
  });

  it('workflow_slug: hyphens and case', () => {
    ok({ workflow_slug: 'a-b-c1-2' });
    bad({ workflow_slug: '-ab' }, 'workflow_slug: must be lowercase');
    bad({ workflow_slug: 'ab-' }, 'workflow_slug: must be lowercase');
    bad({ workflow_slug: 'a--b' }, 'workflow_slug: must be lowercase');
    bad({ workflow_slug: 'Ab' }, 'workflow_slug: must be lowercase');
    bad({ workflow_slug: 'a_b' }, 'workflow_slug: must be lowercase');
    bad({ workflow_slug: 'a b' }, 'workflow_slug: must be lowercase');
    bad({ workflow_slug: 12 }, /^workflow_slug: /);
  });

  it('display_name: 0/1/255/256', () => {
    bad({ display_name: '' }, /^display_name: /);
    ok({ display_name: 'x' });
    ok({ display_name: 'x'.repeat(255) });
    bad({ display_name: 'x'.repeat(256) }, /^display_name: /);
  });

  it('description: 2000/2001', () => {
    assert.equal(ok({ description: 'd'.repeat(2000) }).description?.length, 2000);
    bad({ description: 'd'.repeat(2001) }, /^description: /);
  });

  it('preferred_gpu: 100/101', () => {
    ok({ preferred_gpu: 'g'.repeat(100) });
    bad({ preferred_gpu: 'g'.repeat(101) }, /^preferred_gpu: /);
  });

  it('min_vram_gb: -0.1/0/2048/2048.1', () => {
    bad({ min_vram_gb: -0.1 }, /^min_vram_gb: /);
    assert.equal(ok({ min_vram_gb: 0 }).min_vram_gb, 0);
    assert.equal(ok({ min_vram_gb: 2048 }).min_vram_gb, 2048);
    assert.equal(ok({ min_vram_gb: 7.5 }).min_vram_gb, 7.5);
    bad({ min_vram_gb: 2048.1 }, /^min_vram_gb: /);
    bad({ min_vram_gb: '8' }, /^min_vram_gb: /);
  });

  it('task_timeout: -1/0, integer only', () => {
    bad({ task_timeout: -1 }, /^task_timeout: /);
    assert.equal(ok({ task_timeout: 0 }).task_timeout, 0);
    ok({ task_timeout: 86400 });
    bad({ task_timeout: 1.5 }, /^task_timeout: /);
  });

  it('max_retries: -1/0 and the cap 100/101', () => {
    bad({ max_retries: -1 }, /^max_retries: /);
    ok({ max_retries: 0 });
    ok({ max_retries: 100 });
    bad({ max_retries: 101 }, 'max_retries: must be <= 100');
    bad({ max_retries: 2.5 }, /^max_retries: /);
  });

  it('required_models: 512 vs 513 entries', () => {
    const many = (n: number): string[] => Array.from({ length: n }, (_, i) => `checkpoints/m${i}.safetensors`);
    assert.equal(ok({ required_models: many(512) }).required_models.length, 512);
    bad({ required_models: many(513) }, /^required_models: /);
  });

  it('required_models: entry of 512 vs 513 chars', () => {
    // segments of 199 characters: a file or directory name is at most 255 (the agents' rule)
    const path = (n: number): string => `loras/${`${'x'.repeat(199)}/`.repeat(3)}`.slice(0, n);
    assert.equal(path(512).length, 512);
    ok({ required_models: [path(512)] });
    bad({ required_models: [path(513)] }, /^required_models\.0: /);
  });

  it('required_models: a segment of 255 vs 256 chars', () => {
    ok({ required_models: [`loras/${'x'.repeat(255)}`] });
    bad({ required_models: [`loras/${'x'.repeat(256)}`] }, /^required_models\.0: each segment must be at most 255 characters/);
  });

  it('required_models: path rules', () => {
    ok({ required_models: ['checkpoints/SD 1.5/v1-5_pruned.emaonly.safetensors'] });
    bad({ required_models: ['/etc/passwd'] }, 'required_models.0: must be relative');
    bad({ required_models: ['loras/../../x'] }, 'required_models.0: must not contain ..');
    bad({ required_models: ['a', 'loras\\x.safetensors'] }, 'required_models.1: must not contain a backslash');
    bad({ required_models: ['loras/x:y'] }, 'required_models.0: may only contain');
    bad({ required_models: ['loras/ü.safetensors'] }, 'required_models.0: may only contain');
    bad({ required_models: [''] }, 'required_models.0: must not be empty');
  });

  it('modelPathSchema is exported for the models API', () => {
    assert.equal(modelPathSchema.safeParse('loras/detail.safetensors').success, true);
    assert.equal(modelPathSchema.safeParse('../x').success, false);
  });

  it('required_labels: non-empty strings, 100 chars each, 64 entries', () => {
    ok({ required_labels: ['gpu', 'l'.repeat(100)] });
    bad({ required_labels: [''] }, /^required_labels\.0: /);
    bad({ required_labels: ['l'.repeat(101)] }, /^required_labels\.0: /);
    ok({ required_labels: Array.from({ length: 64 }, (_, i) => `l${i}`) });
    bad({ required_labels: Array.from({ length: 65 }, (_, i) => `l${i}`) }, /^required_labels: /);
  });

  it('enums: tool_type and default_dispatch_target', () => {
    bad({ tool_type: 'blender' }, /^tool_type: /);
    bad({ default_dispatch_target: 'cloud' }, /^default_dispatch_target: /);
    assert.equal(ok({ default_dispatch_target: 'comfy_cloud' }).default_dispatch_target, 'comfy_cloud');
  });

  it('rejects unknown fields (no mass assignment)', () => {
    bad({ id: '0190b8a0-0000-7000-8000-000000000000' }, 'unknown field(s): id');
    bad({ team_id: 'x', version: 3 }, 'unknown field(s): team_id, version');
    bad({ parameters: [{ key: 'seed', node_id: '3', field: 'seed', bogus: 1 }] }, 'parameters.0: unknown field(s): bogus');
  });

  it('workflow_json must be an object', () => {
    bad({ workflow_json: [] }, /^workflow_json: /);
    bad({ workflow_json: 'x' }, /^workflow_json: /);
    bad({ workflow_json: null }, /^workflow_json: /);
    rejects(() => parseWorkflowCreate({ workflow_slug: 'ab', display_name: 'x' }), /^workflow_json: /);
  });

  it('rejects a non-object body', () => {
    rejects(() => parseWorkflowCreate(null), /expected object/i);
  });
});

describe('workflow_json: ComfyUI API-format graph', () => {
  it('accepts the txt2img and img2img fixtures', () => {
    ok({});
    ok({ workflow_json: structuredClone(img2img) });
  });

  const withNode = (id: string, node: unknown): Record<string, unknown> => ({ ...structuredClone(txt2img), [id]: node });

  it('empty graph', () => {
    bad({ workflow_json: {} }, 'workflow_json: the graph has no nodes');
  });
  it('UI format is recognised', () => {
    bad({ workflow_json: { nodes: [], links: [], version: 0.4 } }, 'UI workflow format');
  });
  it('node not an object', () => {
    bad({ workflow_json: withNode('10', 'x') }, 'workflow_json: node "10" must be an object');
  });
  it('class_type missing or empty', () => {
    bad({ workflow_json: withNode('10', { inputs: {} }) }, 'workflow_json: node "10" class_type must be a non-empty string');
    bad({ workflow_json: withNode('10', { class_type: ' ', inputs: {} }) }, 'node "10" class_type');
  });
  it('inputs missing or not an object', () => {
    bad({ workflow_json: withNode('10', { class_type: 'X' }) }, 'workflow_json: node "10" (X) inputs must be an object');
    bad({ workflow_json: withNode('10', { class_type: 'X', inputs: [] }) }, 'node "10" (X) inputs');
  });
  it('_meta shape', () => {
    bad({ workflow_json: withNode('10', { class_type: 'X', inputs: {}, _meta: 'x' }) }, 'node "10" _meta must be an object');
    bad({ workflow_json: withNode('10', { class_type: 'X', inputs: {}, _meta: { title: 3 } }) }, 'node "10" _meta.title must be a string');
  });
  it('link to a missing node names both', () => {
    const g = structuredClone(txt2img) as Record<string, { inputs: Record<string, unknown> }>;
    g['7']!.inputs['clip'] = ['99', 1];
    bad({ workflow_json: g }, 'workflow_json: node "7" input "clip" links to missing node "99"');
  });
  it('malformed links', () => {
    const mk = (v: unknown): Record<string, unknown> => withNode('10', { class_type: 'X', inputs: { a: v } });
    bad({ workflow_json: mk(['4']) }, 'node "10" input "a" is an array but not a link');
    bad({ workflow_json: mk([4, 0]) }, 'node "10" input "a" is an array but not a link');
    bad({ workflow_json: mk(['4', -1]) }, 'node "10" input "a"');
    bad({ workflow_json: mk(['4', 0.5]) }, 'node "10" input "a"');
    bad({ workflow_json: mk(['4', 0, 1]) }, 'node "10" input "a"');
    ok({ workflow_json: mk(['4', 0]) });
  });
  it('self links and cycles', () => {
    bad({ workflow_json: withNode('10', { class_type: 'X', inputs: { a: ['10', 0] } }) }, 'node "10" input "a" links to its own node');
    const g = {
      a: { class_type: 'X', inputs: { i: ['b', 0] } },
      b: { class_type: 'X', inputs: { i: ['c', 0] } },
      c: { class_type: 'X', inputs: { i: ['a', 0] } },
      d: { class_type: 'X', inputs: { i: ['a', 0] } },
    };
    bad({ workflow_json: g }, /workflow_json: node "\w" is part of a cycle/);
  });
  it('reserved node ids', () => {
    const evil = JSON.parse('{"__proto__": {"class_type": "X", "inputs": {}}}') as unknown;
    bad({ workflow_json: evil }, /^workflow_json: /);
    rejects(() => validateComfyGraph(evil), 'workflow_json: node id "__proto__" is not allowed');
    const evilInput = JSON.parse('{"n": {"class_type": "X", "inputs": {"__proto__": 1}}}') as unknown;
    rejects(() => validateComfyGraph(evilInput), 'workflow_json: node "n" input name "__proto__" is not allowed');
  });
});

describe('parameters: comfyui targets, types, constraints', () => {
  const p = (...params: unknown[]): Record<string, unknown> => ({ parameters: params });

  it('infers types from the graph and returns them (export shape)', () => {
    const d = ok(
      p(
        { key: 'prompt', node_id: '6', field: 'text' },
        { key: 'seed', node_id: '3', field: 'seed' },
        { key: 'denoise', node_id: '3', field: 'denoise' },
        { key: 'cfg', node_id: '3', field: 'cfg', type: 'number' },
        { key: 'w', node_id: '5', field: 'width' },
      ),
    );
    assert.deepEqual(
      d.parameters.map((x) => [x.key, x.type]),
      [
        ['prompt', 'string'],
        ['seed', 'integer'],
        ['denoise', 'integer'],
        ['cfg', 'number'],
        ['w', 'integer'],
      ],
    );
    const g = { n: { class_type: 'X', inputs: { f: 0.5, b: true, o: { a: 1 }, s: 's' } } };
    const d2 = ok({
      workflow_json: g,
      parameters: [
        { key: 'f', node_id: 'n', field: 'f' },
        { key: 'b', node_id: 'n', field: 'b' },
        { key: 'o', node_id: 'n', field: 'o' },
        { key: 's', node_id: 'n', field: 's' },
      ],
    });
    assert.deepEqual(
      d2.parameters.map((x) => x.type),
      ['number', 'boolean', 'json', 'string'],
    );
  });

  it('a link or null input needs an explicit type', () => {
    bad(p({ key: 'model', node_id: '3', field: 'model' }), 'parameters[0] (model): type is required because node "3" input "model" is a link');
    ok(p({ key: 'model', node_id: '3', field: 'model', type: 'json' }));
    bad({ workflow_json: { n: { class_type: 'X', inputs: { v: null } } }, parameters: [{ key: 'v', node_id: 'n', field: 'v' }] }, 'parameters[0] (v): type is required');
  });

  it('normalized output keeps schema key order and is idempotent', () => {
    const d = ok(p({ source_key: 'x', description: 'd', field: 'seed', node_id: '3', key: 'seed', min: 0 }, { key: 'x', node_id: '3', field: 'steps' }));
    assert.deepEqual(Object.keys(d.parameters[0]!), ['key', 'type', 'node_id', 'field', 'description', 'min', 'source_key']);
    const again = parseWorkflowCreate(JSON.parse(JSON.stringify(d)) as unknown);
    assert.equal(JSON.stringify(again), JSON.stringify(d));
  });

  it('node_id and field are required and must exist', () => {
    bad(p({ key: 'seed', field: 'seed' }), 'parameters[0] (seed): node_id is required');
    bad(p({ key: 'seed', node_id: '3' }), 'parameters[0] (seed): field is required');
    bad(p({ key: 'a', node_id: '6', field: 'text' }, { key: 'b', node_id: '6', field: 'text' }), 'parameters[1] (b): node "6" input "text" is already targeted by parameters[0] (a)');
    bad(
      p({ key: 'prompt', node_id: '6', field: 'text' }, { key: 'steps', node_id: '3', field: 'steps' }, { key: 'seed', node_id: '3', field: 'sed' }),
      'parameters[2] (seed): node "3" (KSampler) has no input "sed"',
    );
    bad(p({ key: 'seed', node_id: '99', field: 'seed' }), 'parameters[0] (seed): node "99" does not exist in workflow_json');
    bad(p({ key: 'seed', node_id: '3', field: 'seed', target_path: 'a.b' }), 'parameters[0] (seed): target_path is for nerfstudio');
  });

  it('keys: unique, valid, not reserved', () => {
    bad(p({ key: 'seed', node_id: '3', field: 'seed' }, { key: 'seed', node_id: '3', field: 'steps' }), 'parameters[1] (seed): duplicate key "seed"');
    bad(p({ key: '1seed', node_id: '3', field: 'seed' }), /^parameters\.0\.key: /);
    bad(p({ key: '', node_id: '3', field: 'seed' }), /^parameters\.0\.key: /);
    bad(p({ key: 'k'.repeat(101), node_id: '3', field: 'seed' }), /^parameters\.0\.key: /);
    ok(p({ key: 'k'.repeat(100), node_id: '3', field: 'seed' }));
    ok(p({ key: '_a.b-c', node_id: '3', field: 'seed' }));
    bad(p({ key: 'constructor', node_id: '3', field: 'seed' }), 'parameters.0.key: is a reserved name');
    bad(p({ key: 'seed', node_id: '3', field: 'seed', type: 'float' }), /^parameters\.0\.type: /);
  });

  it('options / min / max / accept consistency with type', () => {
    ok(p({ key: 'sampler', node_id: '3', field: 'sampler_name', options: ['euler', 'dpmpp_2m'], default: 'euler' }));
    bad(p({ key: 'steps', node_id: '3', field: 'steps', options: ['1'] }), 'parameters[0] (steps): options are only allowed for type string');
    bad(p({ key: 's', node_id: '3', field: 'sampler_name', options: ['a', 'a'] }), 'options contains "a" twice');
    bad(p({ key: 's', node_id: '3', field: 'sampler_name', options: [] }), /^parameters\.0\.options: /);
    bad(p({ key: 's', node_id: '3', field: 'sampler_name', min: 1 }), 'parameters[0] (s): min and max are only allowed for types integer and number');
    bad(p({ key: 'steps', node_id: '3', field: 'steps', min: 10, max: 5 }), 'parameters[0] (steps): min (10) must be <= max (5)');
    ok(p({ key: 'steps', node_id: '3', field: 'steps', min: 5, max: 5 }));
    bad(p({ key: 'steps', node_id: '3', field: 'steps', accept: ['image/png'] }), 'accept is only allowed for type file');
    ok({ workflow_json: structuredClone(img2img), parameters: [{ key: 'image', node_id: '10', field: 'image', type: 'file', accept: ['image/png', 'image/*', '.jpg', '*/*', '.tar.gz'] }] });
    bad({ workflow_json: structuredClone(img2img), parameters: [{ key: 'image', node_id: '10', field: 'image', type: 'file', accept: ['png'] }] }, 'accept entry "png"');
  });

  it('defaults must be valid for their definition', () => {
    ok(p({ key: 'steps', node_id: '3', field: 'steps', min: 1, max: 150, default: 150 }));
    bad(p({ key: 'steps', node_id: '3', field: 'steps', min: 1, max: 150, default: 151 }), 'parameters[0] (steps): default must be <= 150 (got 151)');
    bad(p({ key: 'steps', node_id: '3', field: 'steps', default: 1.5 }), 'parameters[0] (steps): default must be an integer (got 1.5)');
    bad(p({ key: 'steps', node_id: '3', field: 'steps', default: '20' }), 'default must be an integer (got string "20")');
    bad(p({ key: 's', node_id: '3', field: 'sampler_name', options: ['euler'], default: 'ddim' }), 'default must be one of "euler" (got string "ddim")');
    bad({ workflow_json: structuredClone(img2img), parameters: [{ key: 'image', node_id: '10', field: 'image', type: 'file', default: 'fk' }] }, 'file parameters cannot have a default');
    ok(p({ key: 'cfg', node_id: '3', field: 'cfg', type: 'json', default: null }));
    ok(p({ key: 'model', node_id: '3', field: 'model', type: 'json', default: ['4', 0] }));
    bad(p({ key: 'model', node_id: '3', field: 'model', type: 'json', default: ['44', 0] }), 'parameters[0] (model): default is an array');
    bad(p({ key: 'cfg', node_id: '3', field: 'cfg', type: 'json', default: [1, 2] }), 'parameters[0] (cfg): default is an array');
  });

  it('source_key must name another, compatible parameter without cycles', () => {
    ok(p({ key: 'seed', node_id: '3', field: 'seed' }, { key: 'steps', node_id: '3', field: 'steps', source_key: 'seed' }));
    bad(p({ key: 'seed', node_id: '3', field: 'seed', source_key: 'nope' }), 'parameters[0] (seed): source_key "nope" is not a parameter');
    bad(p({ key: 'seed', node_id: '3', field: 'seed', source_key: 'seed' }), 'parameters[0] (seed): source_key must name another parameter');
    bad(p({ key: 'prompt', node_id: '6', field: 'text' }, { key: 'seed', node_id: '3', field: 'seed', source_key: 'prompt' }), 'parameters[1] (seed): source_key "prompt" is of type string');
    bad(
      p({ key: 'a', node_id: '3', field: 'seed', source_key: 'b' }, { key: 'b', node_id: '3', field: 'steps', source_key: 'a' }),
      /parameters\[0\] \(a\): source_key cycle \(a -> b -> a\)/,
    );
  });
});

describe('workflow_json: nerfstudio pipeline spec', () => {
  const spec = (over: Record<string, unknown> = {}): Record<string, unknown> => ({
    method: 'splatfacto',
    data: { source: 'file_param' },
    process_data: { input_type: 'video', num_frames_target: 300 },
    train: { max_num_iterations: 30000 },
    export: { format: 'gaussian-splat' },
    ...over,
  });
  const scanParam = { key: 'scan', type: 'file', target_path: 'data.file_key', required: true, accept: ['video/*', '.zip'] };
  const nerf = (json: unknown, params: unknown[] = [scanParam]): Record<string, unknown> => ({ tool_type: 'nerfstudio', workflow_json: json, parameters: params });

  it('accepts a full spec with typed parameters', () => {
    const d = ok(
      nerf(spec(), [
        scanParam,
        { key: 'iters', target_path: 'train.max_num_iterations', min: 100, max: 100000 },
        { key: 'fmt', target_path: 'export.format', options: ['gaussian-splat'] },
        { key: 'cull', target_path: 'train.extra_args.pipeline.model.cull-alpha-thresh', type: 'number' },
        { key: 'seed', target_path: 'train.seed', default: 42 },
      ]),
    );
    assert.deepEqual(
      d.parameters.map((x) => x.type),
      ['file', 'integer', 'string', 'number', 'integer'],
    );
    ok(nerf(spec({ data: { source: 'url', url: 'https://example.com/scan.zip' } }), []));
    ok(nerf({ method: 'nerfacto', data: { source: 'path', path: 'datasets/poster' } }, []));
  });

  it('structure errors name the field', () => {
    bad(nerf({ data: { source: 'url', url: 'https://x.y/z' } }, []), /^workflow_json\.method: /);
    bad(nerf(spec({ method: 'Nerf Acto' }), []), /^workflow_json\.method: /);
    bad(nerf(spec({ data: { source: 's3' } }), []), /^workflow_json\.data\.source: /);
    bad(nerf(spec({ data: { source: 'url' } }), []), 'workflow_json.data.url: required when data.source is url');
    bad(nerf(spec({ data: { source: 'url', url: 'ftp://x.y/z' } }), []), /^workflow_json\.data\.url: /);
    bad(nerf(spec({ data: { source: 'path', path: 'p', url: 'https://x.y' } }), []), 'workflow_json.data.url: not allowed when data.source is path');
    bad(nerf(spec({ train: { max_num_iterations: 0 } })), /^workflow_json\.train\.max_num_iterations: /);
    bad(nerf(spec({ train: { iterations: 10 } })), 'workflow_json.train: unknown field(s): iterations');
    bad(nerf(spec({ export: { format: 'obj' } })), /^workflow_json\.export\.format: /);
    bad(nerf(spec({ export: { format: 'mesh', num_points: 10 } })), 'workflow_json.export.num_points: only applies to export.format pointcloud');
    bad(nerf(spec({ extra: 1 })), 'workflow_json: unknown field(s): extra');
    bad(nerf([]), /^workflow_json: /);
  });

  it('what a real nerfstudio install cannot run to the end is refused at create, naming the field', () => {
    const ns = (over: Record<string, unknown>): Record<string, unknown> => nerf(spec(over), [scanParam]);
    // methods that cannot train on a nerfstudio dataset (method_configs.py dataparsers)
    for (const m of ['dnerf', 'neus-facto', 'generfacto', 'phototourism', 'semantic-nerfw']) bad(ns({ method: m, export: undefined }), new RegExp(`^workflow_json\\.method: ${m} cannot train on a capture`));
    // COLMAP options on input types that run no COLMAP (process_data.py)
    for (const it of ['polycam', 'record3d', 'metashape', 'realitycapture', 'odm']) {
      for (const f of ['camera_type', 'matching_method', 'sfm_tool', 'skip_colmap']) {
        const v = { camera_type: 'fisheye', matching_method: 'exhaustive', sfm_tool: 'colmap', skip_colmap: true }[f];
        bad(ns({ process_data: { input_type: it, [f]: v } }), `workflow_json.process_data.${f}: only applies to process_data.input_type images or video`);
      }
      ok(ns({ process_data: { input_type: it, num_downscales: 2 } }));
    }
    bad(ns({ process_data: { input_type: 'images', num_frames_target: 10 } }), 'workflow_json.process_data.num_frames_target: only applies to process_data.input_type video');
    // export formats the model cannot produce (exporter.py)
    bad(ns({ export: { format: 'pointcloud' } }), /^workflow_json\.export\.format: pointcloud cannot export a splatfacto run/);
    bad(ns({ export: { format: 'mesh' } }), /^workflow_json\.export\.format: mesh cannot export a splatfacto run/);
    bad(ns({ method: 'nerfacto', export: { format: 'gaussian-splat' } }), /^workflow_json\.export\.format: gaussian-splat needs a splatfacto-family method/);
    bad(ns({ method: 'nerfacto', export: { format: 'mesh', mesh_method: 'marching-cubes' } }), /^workflow_json\.export\.mesh_method: marching-cubes needs an SDF method/);
    bad(ns({ method: 'nerfacto', export: { format: 'mesh', mesh_method: 'tsdf', normal_method: 'open3d' } }), /^workflow_json\.export\.normal_method: ns-export tsdf has no normal method/);
    bad(ns({ method: 'nerfacto', export: { format: 'pointcloud', normal_method: 'model_output' } }), /^workflow_json\.export\.normal_method: model_output needs a model that predicts normals/);
    ok(ns({ method: 'nerfacto', train: { extra_args: { 'pipeline.model.predict-normals': true } }, export: { format: 'pointcloud', normal_method: 'model_output' } }));
    ok(ns({ method: 'nerfacto', export: { format: 'mesh', mesh_method: 'tsdf', target_num_faces: 1000 } }));
    ok(ns({ method: 'nerfacto', export: {} })); // export.format is optional: the method decides
    ok(ns({ method: 'my-plugin-method', export: { format: 'gaussian-splat' } })); // an unknown (plugin) method is left to ns-train
    // extra_args cannot override what the executor sets
    bad(ns({ train: { extra_args: { 'output-dir': '/tmp/x' } } }), 'workflow_json.train.extra_args.output-dir: is set by the executor and cannot be overridden');
    bad(ns({ train: { extra_args: { vis: 'viewer' } } }), 'workflow_json.train.extra_args.vis: is set by the executor');
    bad(ns({ train: { extra_args: { load_dir: '/x' } } }), 'workflow_json.train.extra_args.load_dir: is set by the executor');
    bad(ns({ process_data: { input_type: 'video', extra_args: { 'output-dir': 'x' } } }), 'workflow_json.process_data.extra_args.output-dir: is set by the executor');
    bad(ns({ export: { extra_args: { 'load-config': 'x' } } }), 'workflow_json.export.extra_args.load-config: is set by the executor');
  });

  it('file_param source needs a required file parameter at data.file_key', () => {
    bad(nerf(spec(), []), 'workflow_json.data.source: file_param needs a parameter of type file with target_path "data.file_key"');
    bad(nerf(spec(), [{ ...scanParam, required: false }]), 'parameters[0] (scan): must be required');
  });

  it('parameter targets', () => {
    bad(nerf(spec(), [scanParam, { key: 'x', node_id: '3', field: 'seed' }]), 'parameters[1] (x): node_id and field are for comfyui');
    bad(nerf(spec(), [scanParam, { key: 'x', type: 'integer' }]), 'parameters[1] (x): target_path is required');
    bad(nerf(spec(), [scanParam, { key: 'x', type: 'integer', target_path: 'train.iterations' }]), 'parameters[1] (x): target_path "train.iterations": unknown target');
    bad(nerf(spec(), [scanParam, { key: 'x', type: 'integer', target_path: 'train..x' }]), 'parameters[1] (x): target_path "train..x"');
    bad(nerf(spec(), [scanParam, { key: 'x', type: 'string', target_path: 'method.x' }]), 'method is not an object');
    bad(nerf(spec(), [scanParam, { key: 'x', type: 'json', target_path: 'train' }, { key: 'y', target_path: 'train.seed', type: 'integer' }]), 'parameters[2] (y): target_path "train.seed" overlaps the target of parameters[1] (x)');
    bad(nerf(spec(), [scanParam, { key: 'x', target_path: 'train.seed' }]), 'parameters[1] (x): type is required');
    bad(nerf(spec({ export: undefined }), [scanParam, { key: 'x', type: 'integer', target_path: 'export.num_points' }]), 'parameters[1] (x): target_path "export.num_points" needs workflow_json.export (with its format) to exist');
    ok(nerf(spec({ export: undefined }), [scanParam, { key: 'x', target_path: 'export.format', options: ['gaussian-splat'], type: 'string' }]));
    // an option that cannot run on this method (a splatfacto run has no mesh export) is refused now, not at run time
    bad(nerf(spec({ export: undefined }), [scanParam, { key: 'x', target_path: 'export.format', options: ['gaussian-splat', 'mesh'], type: 'string' }]), 'parameters[1] (x): option "mesh" makes workflow_json.export.format invalid: mesh cannot export a splatfacto run');
    bad(nerf(spec(), [scanParam, { key: 'm', target_path: 'method', options: ['splatfacto', 'nerfacto'] }]), 'parameters[1] (m): option "nerfacto" makes workflow_json.export.format invalid: gaussian-splat needs a splatfacto-family method');
    bad(nerf(spec(), [scanParam, { key: 'm', target_path: 'method', default: 'dnerf' }]), 'parameters[1] (m): default "dnerf" makes workflow_json.method invalid');
    ok(nerf(spec({ train: undefined }), [scanParam, { key: 'x', type: 'integer', target_path: 'train.seed' }]));
    assert.equal(ok(nerf(spec(), [scanParam, { key: 'x', target_path: 'train.seed', default: 7 }])).parameters[1]?.type, 'integer');
  });
});

describe('workflow update', () => {
  it('every field optional, at least one required, strict', () => {
    assert.deepEqual(parseWorkflowUpdate({ display_name: 'x' }), { display_name: 'x' });
    assert.deepEqual(parseWorkflowUpdate({ workflow_status: 'archived', snapshot_note: 'n' }), { workflow_status: 'archived', snapshot_note: 'n' });
    rejects(() => parseWorkflowUpdate({}), 'at least one field is required');
    rejects(() => parseWorkflowUpdate({ id: 'x' }), 'unknown field(s): id');
    rejects(() => parseWorkflowUpdate({ workflow_status: 'deleted' }), /^workflow_status: /);
    rejects(() => parseWorkflowUpdate({ snapshot_note: 'n'.repeat(2001) }), /^snapshot_note: /);
    parseWorkflowUpdate({ snapshot_note: 'n'.repeat(2000) });
    rejects(() => parseWorkflowUpdate({ workflow_slug: 'A' }), /^workflow_slug: /);
    rejects(() => parseWorkflowUpdate({ max_retries: 101 }), /^max_retries: /);
  });

  it('merges only the given fields and re-validates', () => {
    const cur = ok({ description: 'd', parameters: [{ key: 'seed', node_id: '3', field: 'seed' }] });
    const next = mergeWorkflowUpdate(cur, parseWorkflowUpdate({ display_name: 'New', snapshot_note: 'rename' }));
    assert.equal(next.display_name, 'New');
    assert.equal(next.description, 'd');
    assert.deepEqual(next.parameters, cur.parameters);
    assert.equal('snapshot_note' in next, false);
    const g = structuredClone(txt2img) as Record<string, unknown>;
    delete g['3'];
    g['8'] = { class_type: 'VAEDecode', inputs: { vae: ['4', 2] } };
    rejects(() => mergeWorkflowUpdate(cur, parseWorkflowUpdate({ workflow_json: g })), 'parameters[0] (seed): node "3" does not exist');
  });
});

describe('validateWorkflowDefinition on a zod-parsed definition', () => {
  it('works on workflowCreateSchema output', () => {
    const parsed = workflowCreateSchema.parse(base({ parameters: [{ key: 'steps', node_id: '3', field: 'steps' }] }));
    assert.equal(validateWorkflowDefinition(parsed).parameters[0]?.type, 'integer');
    assert.equal(parsed.parameters[0]?.type, undefined, 'input definition is not mutated');
  });
});
