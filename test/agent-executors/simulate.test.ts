import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';
import { after, describe, test } from 'node:test';
import { createExecutor } from '../../src/agent/executors/index.js';
import { SimulateExecutor } from '../../src/agent/executors/simulate.js';
import { ExecutorError, type ExecContext, type ProgressTick } from '../../src/agent/executors/types.js';
import { crc32, encodePng, inspectPng, renderSeededPng } from '../../src/agent/png.js';

const tmpRoot = await mkdtemp(path.join(os.tmpdir(), 'gantry-sim-test-'));
after(() => rm(tmpRoot, { recursive: true, force: true }));
let seq = 0;

async function makeCtx(parameters: Record<string, unknown> = {}, workflow: unknown = {}, signal?: AbortSignal) {
  const workDir = path.join(tmpRoot, `task-${++seq}`);
  await mkdir(workDir, { recursive: true });
  const ticks: ProgressTick[] = [];
  const tickListeners: ((t: ProgressTick) => void)[] = [];
  const ctx: ExecContext = {
    taskId: `task_${seq}`,
    attempt: 1,
    toolType: 'comfyui',
    workflow,
    parameters,
    inputFiles: [],
    workDir,
    signal: signal ?? new AbortController().signal,
    onProgress: (t) => {
      ticks.push(t);
      for (const l of tickListeners) l(t);
    },
    log: () => undefined,
  };
  const nextTick = (): Promise<ProgressTick> => new Promise((resolve) => tickListeners.push(resolve));
  return { ctx, ticks, workDir, nextTick };
}

async function rejection(p: Promise<unknown>): Promise<ExecutorError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof ExecutorError, `expected ExecutorError, got ${String(e)}`);
    return e;
  }
  assert.fail('expected the run to fail');
}

describe('png', () => {
  test('encodePng writes a structurally valid PNG', () => {
    const rgb = new Uint8Array(3 * 4 * 2).map((_, i) => (i * 37) % 256);
    const png = encodePng(4, 2, rgb);
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    // IHDR is the first chunk: length 13, width 4, height 2, depth 8, colour type 2
    assert.equal(png.readUInt32BE(8), 13);
    assert.equal(png.toString('latin1', 12, 16), 'IHDR');
    assert.equal(png.readUInt32BE(16), 4);
    assert.equal(png.readUInt32BE(20), 2);
    assert.equal(png[24], 8);
    assert.equal(png[25], 2);
    assert.equal(png.readUInt32BE(29), zlib.crc32(png.subarray(12, 29)) >>> 0);
    const info = inspectPng(png); // checks every chunk CRC and inflates IDAT
    assert.deepEqual(info.chunks, ['IHDR', 'IDAT', 'IEND']);
    // scanlines: filter byte 0 + raw RGB
    assert.equal(info.raw.length, 2 * (1 + 12));
    assert.deepEqual([...info.raw.subarray(1, 13)], [...rgb.subarray(0, 12)]);
    assert.deepEqual([...info.raw.subarray(14, 26)], [...rgb.subarray(12, 24)]);
  });

  test('crc32 matches the PNG reference value', () => {
    assert.equal(crc32(Buffer.from('IEND')), 0xae426082);
  });

  test('renderSeededPng is deterministic per seed', () => {
    const a = renderSeededPng('seed-a');
    assert.ok(a.equals(renderSeededPng('seed-a')));
    assert.ok(!a.equals(renderSeededPng('seed-b')));
    const info = inspectPng(a);
    assert.equal(info.width, 64);
    assert.equal(info.height, 64);
    assert.throws(() => inspectPng(Buffer.concat([a.subarray(0, 40), Buffer.from([0]), a.subarray(41)])), /bad CRC|IDAT|inflate|incorrect/i);
  });
});

describe('SimulateExecutor', () => {
  test('emits evenly spread progress ticks and writes a PNG seeded by the parameters', async () => {
    const exec = new SimulateExecutor({ durationMs: 50, steps: 5 });
    const { ctx, ticks } = await makeCtx({ prompt: 'a cat', seed: 3 });
    const t0 = Date.now();
    const res = await exec.run(ctx);
    assert.ok(Date.now() - t0 >= 40, 'takes about durationMs');
    assert.deepEqual(
      ticks.map((t) => [t.step_current, t.step_total, t.progress]),
      [1, 2, 3, 4, 5].map((i) => [i, 5, i / 5]),
    );
    assert.ok(ticks.every((t) => t.current_node === 'simulate'));
    const out = res.outputs[0]!;
    assert.equal(out.name, 'output.png');
    assert.equal(out.contentType, 'image/png');
    const bytes = await readFile(out.localPath);
    assert.equal(out.size, bytes.length);
    inspectPng(bytes);

    const again = await makeCtx({ seed: 3, prompt: 'a cat' }); // same parameters, other key order
    const same = await new SimulateExecutor({ durationMs: 0, steps: 1 }).run(again.ctx);
    assert.ok((await readFile(same.outputs[0]!.localPath)).equals(bytes));
    const other = await makeCtx({ prompt: 'a dog', seed: 3 });
    const diff = await new SimulateExecutor({ durationMs: 0, steps: 1 }).run(other.ctx);
    assert.ok(!(await readFile(diff.outputs[0]!.localPath)).equals(bytes));
  });

  test('durationMs 0 is instant; overrides come from parameters or any graph node', async () => {
    const exec = createExecutor({ kind: 'simulate', durationMs: 60_000, steps: 100 });
    const { ctx, ticks } = await makeCtx({ simulate_duration_ms: 0 }, { '3': { class_type: 'KSampler', inputs: { simulate_steps: 3 } } });
    const t0 = Date.now();
    await exec.run(ctx);
    assert.ok(Date.now() - t0 < 1000);
    assert.deepEqual(
      ticks.map((t) => t.step_current),
      [1, 2, 3],
    );
  });

  test('simulate_fail rejects with tool_error carrying the message', async () => {
    const exec = new SimulateExecutor({ durationMs: 0, steps: 4 });
    const { ctx, ticks } = await makeCtx({ simulate_fail: 'out of VRAM (simulated)' });
    const err = await rejection(exec.run(ctx));
    assert.equal(err.code, 'tool_error');
    assert.equal(err.message, 'out of VRAM (simulated)');
    assert.equal(ticks.length, 2, 'fails half-way');
  });

  test('abort mid-run rejects with cancelled', async () => {
    const exec = new SimulateExecutor({ durationMs: 60_000, steps: 1000 });
    const ac = new AbortController();
    const { ctx, nextTick } = await makeCtx({}, {}, ac.signal);
    const first = nextTick();
    const run = exec.run(ctx);
    await first;
    ac.abort();
    assert.equal((await rejection(run)).code, 'cancelled');
  });

  test('simulate_hang never finishes until aborted', async () => {
    const exec = new SimulateExecutor({ durationMs: 0, steps: 2 });
    const ac = new AbortController();
    const { ctx, ticks } = await makeCtx({ simulate_hang: true }, {}, ac.signal);
    let settled = false;
    const run = exec.run(ctx).finally(() => (settled = true));
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    assert.equal(ticks.length, 2);
    assert.equal(settled, false);
    ac.abort();
    assert.equal((await rejection(run)).code, 'cancelled');
  });

  test('an already-aborted signal rejects immediately', async () => {
    const ac = new AbortController();
    ac.abort();
    const { ctx } = await makeCtx({}, {}, ac.signal);
    assert.equal((await rejection(new SimulateExecutor().run(ctx))).code, 'cancelled');
  });

  test('simulate_crash SIGKILLs the hosting process', async () => {
    const mod = fileURLToPath(new URL('../../src/agent/executors/simulate.ts', import.meta.url));
    const script = `
      import { SimulateExecutor } from ${JSON.stringify(mod)};
      const ex = new SimulateExecutor({ durationMs: 0, steps: 3 });
      await ex.run({ taskId: 't', attempt: 1, toolType: 'comfyui', workflow: {}, parameters: { simulate_crash: true },
        inputFiles: [], workDir: ${JSON.stringify(tmpRoot)}, signal: new AbortController().signal,
        onProgress: (t) => console.log('tick', t.step_current), log: () => {} });
      console.log('survived');
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
    assert.equal(signal, 'SIGKILL');
    assert.equal(code, null);
    assert.match(out, /tick 0/);
    assert.doesNotMatch(out, /survived/);
  });
});
