import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { AppError } from '../../src/shared/errors.js';
import { parseWorkflowCreate, type WorkflowDefinition } from '../../src/domain/workflows/schema.js';
import { collectFileKeys, resolveRunParameters, type ResolveRunArgs, type StagedFile } from '../../src/domain/workflows/parameters.js';

type Graph = Record<string, { class_type: string; inputs: Record<string, unknown> }>;
const loadGraph = (name: string): Graph => JSON.parse(readFileSync(new URL(`../fixtures/comfy/${name}.json`, import.meta.url), 'utf8')) as Graph;

const TEAM = 'team-a';
const NOW = 1_700_000_000_000;

const txt2img = parseWorkflowCreate({
  workflow_slug: 'txt2img',
  display_name: 'txt2img',
  workflow_json: loadGraph('txt2img'),
  parameters: [
    { key: 'prompt', node_id: '6', field: 'text', required: true },
    { key: 'negative', node_id: '7', field: 'text', default: 'blurry, watermark' },
    { key: 'seed', node_id: '3', field: 'seed', min: 0, max: 2 ** 32 - 1 },
    { key: 'steps', node_id: '3', field: 'steps', min: 1, max: 150, default: 20 },
    { key: 'cfg', node_id: '3', field: 'cfg', type: 'number', min: 0, max: 30 },
    { key: 'sampler', node_id: '3', field: 'sampler_name', options: ['euler', 'euler_ancestral', 'dpmpp_2m'] },
    { key: 'width', node_id: '5', field: 'width', min: 64, max: 2048 },
    { key: 'height', node_id: '5', field: 'height', min: 64, max: 2048, source_key: 'width' },
    { key: 'extra', node_id: '9', field: 'filename_prefix', type: 'json' },
  ],
});

const img2img = parseWorkflowCreate({
  workflow_slug: 'img2img',
  display_name: 'img2img',
  workflow_json: loadGraph('img2img'),
  parameters: [
    { key: 'image', node_id: '10', field: 'image', type: 'file', required: true, accept: ['image/png', 'image/jpeg', '.webp'] },
    { key: 'denoise', node_id: '3', field: 'denoise', min: 0, max: 1 },
    { key: 'flag', node_id: '3', field: 'scheduler', type: 'boolean' },
  ],
});

const nerf = parseWorkflowCreate({
  workflow_slug: 'splat',
  display_name: 'splat',
  tool_type: 'nerfstudio',
  workflow_json: { method: 'splatfacto', data: { source: 'file_param' }, process_data: { input_type: 'video' }, export: { format: 'gaussian-splat' } },
  parameters: [
    { key: 'scan', type: 'file', target_path: 'data.file_key', required: true, accept: ['video/*', '.zip'] },
    { key: 'iters', type: 'integer', target_path: 'train.max_num_iterations', min: 100, max: 100000, default: 30000 },
    { key: 'cull', type: 'number', target_path: 'train.extra_args.pipeline.model.cull-alpha-thresh' },
    { key: 'frames', type: 'json', target_path: 'process_data.num_frames_target' },
  ],
});

const file = (fileKey: string, over: Partial<StagedFile> = {}): StagedFile => ({
  fileKey,
  teamId: TEAM,
  contentType: 'image/png',
  fileName: 'cat.png',
  expiresAt: NOW + 60_000,
  ...over,
});

function run(def: WorkflowDefinition, input: unknown, files: StagedFile[] = [], over: Partial<ResolveRunArgs> = {}): ReturnType<typeof resolveRunParameters> {
  return resolveRunParameters({
    toolType: def.tool_type,
    workflowJson: def.workflow_json,
    parameters: def.parameters,
    input,
    files: new Map(files.map((f) => [f.fileKey, f])),
    teamId: TEAM,
    now: NOW,
    ...over,
  });
}

function rejects(fn: () => unknown, expected: string | RegExp): void {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof AppError, `expected AppError, got ${String(caught)}`);
  assert.equal(caught.kind, 'bad_request');
  assert.equal(caught.code, 'invalid_parameter');
  if (typeof expected === 'string') assert.ok(caught.message.includes(expected), `message ${JSON.stringify(caught.message)} lacks ${JSON.stringify(expected)}`);
  else assert.match(caught.message, expected);
}

const g = (r: { workflow: unknown }): Graph => r.workflow as Graph;

describe('resolveRunParameters: comfyui', () => {
  it('injects values, applies defaults and keeps the rest of the graph', () => {
    const before = structuredClone(txt2img.workflow_json);
    const r = run(txt2img, { prompt: 'a red fox', seed: 42, cfg: 7.5, sampler: 'dpmpp_2m', width: 768 });
    assert.deepEqual(r.values, { prompt: 'a red fox', negative: 'blurry, watermark', seed: 42, steps: 20, cfg: 7.5, sampler: 'dpmpp_2m', width: 768, height: 768 });
    const out = g(r);
    assert.equal(out['6']?.inputs['text'], 'a red fox');
    assert.equal(out['7']?.inputs['text'], 'blurry, watermark');
    assert.equal(out['3']?.inputs['seed'], 42);
    assert.equal(out['3']?.inputs['steps'], 20);
    assert.equal(out['3']?.inputs['cfg'], 7.5);
    assert.equal(out['3']?.inputs['sampler_name'], 'dpmpp_2m');
    assert.equal(out['5']?.inputs['width'], 768);
    assert.equal(out['5']?.inputs['height'], 768, 'height derived from width via source_key');
    assert.deepEqual(out['3']?.inputs['model'], ['4', 0]);
    assert.equal(out['9']?.inputs['filename_prefix'], 'ComfyUI', 'unset optional parameter keeps the graph value');
    assert.deepEqual(r.fileInputs, []);
    assert.deepEqual(txt2img.workflow_json, before, 'stored graph not mutated');
    assert.notEqual(r.workflow, txt2img.workflow_json);
  });

  it('an explicit value beats source_key, and source_key beats nothing', () => {
    const r = run(txt2img, { prompt: 'p', width: 512, height: 640 });
    assert.equal(g(r)['5']?.inputs['height'], 640);
    const r2 = run(txt2img, { prompt: 'p' });
    assert.equal(g(r2)['5']?.inputs['height'], 512, 'no width -> no height -> graph value');
    assert.equal('height' in r2.values, false);
  });

  it('derived values are checked against the target definition', () => {
    const d = parseWorkflowCreate({
      workflow_slug: 'x1',
      display_name: 'x',
      workflow_json: loadGraph('txt2img'),
      parameters: [
        { key: 'width', node_id: '5', field: 'width', max: 4096 },
        { key: 'height', node_id: '5', field: 'height', max: 1024, source_key: 'width' },
      ],
    });
    rejects(() => run(d, { width: 2048 }), 'parameters.height: value from source_key "width" must be <= 1024 (got 2048)');
  });

  it('input must be a plain object; undefined means no parameters', () => {
    rejects(() => run(txt2img, []), 'parameters: must be an object');
    rejects(() => run(txt2img, 'x'), 'parameters: must be an object');
    rejects(() => run(txt2img, null), 'parameters: must be an object');
    rejects(() => run(txt2img, undefined), 'parameters.prompt: required parameter is missing');
    const d = parseWorkflowCreate({ workflow_slug: 'x2', display_name: 'x', workflow_json: loadGraph('txt2img') });
    assert.deepEqual(run(d, undefined).values, {});
    rejects(() => run(d, { seed: 1 }), 'parameters.seed: unknown parameter (this workflow takes no parameters)');
  });

  it('unknown keys are named', () => {
    rejects(() => run(txt2img, { prompt: 'p', steps: 10, stepz: 10 }), /^parameters\.stepz: unknown parameter \(known parameters: prompt, negative/);
    rejects(() => run(txt2img, JSON.parse('{"prompt":"p","__proto__":{"x":1}}')), 'parameters.__proto__: unknown parameter');
  });

  it('missing required', () => {
    rejects(() => run(txt2img, { seed: 1 }), 'parameters.prompt: required parameter is missing (expected a value of type string)');
  });

  it('numbers: bounds, integrality, no coercion', () => {
    rejects(() => run(txt2img, { prompt: 'p', steps: 200 }), 'parameters.steps: must be <= 150 (got 200)');
    rejects(() => run(txt2img, { prompt: 'p', steps: 0 }), 'parameters.steps: must be >= 1 (got 0)');
    run(txt2img, { prompt: 'p', steps: 1 });
    run(txt2img, { prompt: 'p', steps: 150 });
    rejects(() => run(txt2img, { prompt: 'p', steps: 20.5 }), 'parameters.steps: must be an integer (got 20.5)');
    rejects(() => run(txt2img, { prompt: 'p', steps: '20' }), 'parameters.steps: must be an integer (got string "20")');
    rejects(() => run(txt2img, { prompt: 'p', seed: 2 ** 53 }), 'parameters.seed: must be an integer between');
    rejects(() => run(txt2img, { prompt: 'p', cfg: '7.5' }), 'parameters.cfg: must be a number (got string "7.5")');
    rejects(() => run(txt2img, { prompt: 'p', cfg: Number.NaN }), 'parameters.cfg: must be a number');
    rejects(() => run(txt2img, { prompt: 'p', cfg: 30.01 }), 'parameters.cfg: must be <= 30 (got 30.01)');
    assert.equal(g(run(txt2img, { prompt: 'p', cfg: 7 }))['3']?.inputs['cfg'], 7, 'an integer is a valid number');
    rejects(() => run(txt2img, { prompt: 'p', seed: null }), 'parameters.seed: must be an integer (got null)');
  });

  it('strings, options, booleans, json', () => {
    rejects(() => run(txt2img, { prompt: 5 }), 'parameters.prompt: must be a string (got 5)');
    rejects(() => run(txt2img, { prompt: 'p', sampler: 'ddim' }), 'parameters.sampler: must be one of "euler", "euler_ancestral", "dpmpp_2m" (got string "ddim")');
    rejects(() => run(txt2img, { prompt: 'p', sampler: 'Euler' }), 'parameters.sampler: must be one of');
    rejects(() => run(img2img, { image: 'fk1', flag: 'true' }, [file('fk1')]), 'parameters.flag: must be a boolean true or false (got string "true")');
    assert.equal(g(run(img2img, { image: 'fk1', flag: false }, [file('fk1')]))['3']?.inputs['scheduler'], false);
    const obj = { nested: [1, 'two', { three: true }] };
    const r = run(txt2img, { prompt: 'p', extra: obj });
    assert.deepEqual(g(r)['9']?.inputs['filename_prefix'], obj);
    obj.nested.push(4);
    assert.equal((g(r)['9']?.inputs['filename_prefix'] as typeof obj).nested.length, 3, 'injected values are copies');
    rejects(() => run(txt2img, { prompt: 'p', extra: [1, 2, 3] }), 'parameters.extra: arrays are read as links by ComfyUI');
    rejects(() => run(txt2img, { prompt: 'p', extra: ['99', 0] }), 'parameters.extra: value links to missing node "99"');
    assert.deepEqual(g(run(txt2img, { prompt: 'p', extra: ['8', 0] }))['9']?.inputs['filename_prefix'], ['8', 0]);
  });
});

describe('resolveRunParameters: files', () => {
  it('collectFileKeys returns the file parameters\' values only', () => {
    assert.deepEqual(collectFileKeys(img2img.parameters, { image: 'fk1', denoise: 0.5 }), ['fk1']);
    assert.deepEqual(collectFileKeys(img2img.parameters, { image: 5 }), []);
    assert.deepEqual(collectFileKeys(img2img.parameters, null), []);
    assert.deepEqual(collectFileKeys(txt2img.parameters, { prompt: 'fk' }), []);
  });

  it('injects the file_key and reports the file input', () => {
    const r = run(img2img, { image: 'fk1', denoise: 0.5 }, [file('fk1')]);
    assert.equal(g(r)['10']?.inputs['image'], 'fk1');
    assert.deepEqual(r.fileInputs, [{ key: 'image', fileKey: 'fk1', nodeId: '10', field: 'image' }]);
  });

  it('unknown, foreign-team and expired files', () => {
    rejects(() => run(img2img, { image: 'nope' }, [file('fk1')]), 'parameters.image: file "nope" not found');
    let foreign = '';
    try {
      run(img2img, { image: 'fk2' }, [file('fk2', { teamId: 'team-b' })]);
    } catch (e) {
      foreign = (e as Error).message;
    }
    let missing = '';
    try {
      run(img2img, { image: 'fk2' }, []);
    } catch (e) {
      missing = (e as Error).message;
    }
    assert.equal(foreign, missing, 'a foreign key reads exactly like a missing one');
    rejects(() => run(img2img, { image: 'fk1' }, [file('fk1', { expiresAt: NOW })]), 'parameters.image: file "fk1" has expired');
    run(img2img, { image: 'fk1' }, [file('fk1', { expiresAt: NOW + 1 })]);
    rejects(() => run(img2img, { image: 42 }), 'parameters.image: must be a file_key string');
    rejects(() => run(img2img, { image: '' }), 'parameters.image: must be a file_key string');
  });

  it('accept: exact mime, wildcard, extension', () => {
    run(img2img, { image: 'a' }, [file('a', { contentType: 'image/PNG' })]);
    run(img2img, { image: 'a' }, [file('a', { contentType: 'image/jpeg; charset=binary', fileName: 'x.bin' })]);
    run(img2img, { image: 'a' }, [file('a', { contentType: 'application/octet-stream', fileName: 'photo.WEBP' })]);
    rejects(() => run(img2img, { image: 'a' }, [file('a', { contentType: 'image/gif', fileName: 'x.gif' })]), 'parameters.image: file "x.gif" (image/gif) is not an accepted kind; accepted: image/png, image/jpeg, .webp');
    rejects(() => run(img2img, { image: 'a' }, [file('a', { contentType: 'text/plain', fileName: '.webp' })]), 'parameters.image');
  });
});

describe('resolveRunParameters: nerfstudio', () => {
  const video = (k: string): StagedFile => file(k, { contentType: 'video/mp4', fileName: 'scan.mp4' });

  it('sets dotted paths, creating intermediate objects', () => {
    const before = structuredClone(nerf.workflow_json);
    const r = run(nerf, { scan: 'v1', cull: 0.005 }, [video('v1')]);
    assert.deepEqual(r.workflow, {
      method: 'splatfacto',
      data: { source: 'file_param', file_key: 'v1' },
      process_data: { input_type: 'video' },
      export: { format: 'gaussian-splat' },
      train: { max_num_iterations: 30000, extra_args: { 'pipeline.model.cull-alpha-thresh': 0.005 } },
    });
    assert.deepEqual(r.fileInputs, [{ key: 'scan', fileKey: 'v1', targetPath: 'data.file_key' }]);
    assert.deepEqual(nerf.workflow_json, before);
  });

  it('checks values and the resulting spec', () => {
    rejects(() => run(nerf, { scan: 'v1', iters: 50 }, [video('v1')]), 'parameters.iters: must be >= 100 (got 50)');
    rejects(() => run(nerf, {}, [video('v1')]), 'parameters.scan: required parameter is missing (expected a file_key)');
    rejects(() => run(nerf, { scan: 'v1' }, [file('v1')]), 'parameters.scan: file "cat.png" (image/png) is not an accepted kind');
    rejects(() => run(nerf, { scan: 'v1', frames: 'many' }, [video('v1')]), /^parameters\.frames: makes workflow_json\.process_data\.num_frames_target invalid: /);
    assert.deepEqual((run(nerf, { scan: 'v1', frames: 120 }, [video('v1')]).workflow as { process_data: unknown }).process_data, { input_type: 'video', num_frames_target: 120 });
  });
});
