import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ComfyUIExecutor } from '../../src/agent/executors/comfyui.js';
import { ExecutorError, type ExecContext, type InputFile, type ProgressTick } from '../../src/agent/executors/types.js';
import { inspectPng, renderSeededPng } from '../../src/agent/png.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';

const tmpRoot = await mkdtemp(path.join(os.tmpdir(), 'gantry-comfy-test-'));
let seq = 0;

function makeCtx(workflow: unknown, extra: { inputFiles?: InputFile[]; signal?: AbortSignal; parameters?: Record<string, unknown> } = {}) {
  const ticks: ProgressTick[] = [];
  const logs: string[] = [];
  const workDir = path.join(tmpRoot, `task-${++seq}`);
  const ctx: ExecContext = {
    taskId: `task_${seq}`,
    attempt: 1,
    toolType: 'comfyui',
    workflow,
    parameters: extra.parameters ?? {},
    inputFiles: extra.inputFiles ?? [],
    workDir,
    signal: extra.signal ?? new AbortController().signal,
    onProgress: (t) => ticks.push(t),
    log: (m) => logs.push(m),
  };
  return { ctx, ticks, logs, workDir };
}

async function prepared<T extends { workDir: string }>(x: T): Promise<T> {
  const { mkdir } = await import('node:fs/promises');
  await mkdir(x.workDir, { recursive: true });
  return x;
}

function txt2img(steps = 20, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    '3': {
      class_type: 'KSampler',
      inputs: { seed: 156680208700286, steps, cfg: 8, sampler_name: 'euler', scheduler: 'normal', denoise: 1, model: ['4', 0], positive: ['6', 0], negative: ['7', 0], latent_image: ['5', 0] },
    },
    '4': { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'v1-5-pruned-emaonly.safetensors' } },
    '5': { class_type: 'EmptyLatentImage', inputs: { width: 96, height: 64, batch_size: 1 } },
    '6': { class_type: 'CLIPTextEncode', inputs: { text: 'a lighthouse at dusk, oil painting', clip: ['4', 1] } },
    '7': { class_type: 'CLIPTextEncode', inputs: { text: 'text, watermark', clip: ['4', 1] } },
    '8': { class_type: 'VAEDecode', inputs: { samples: ['3', 0], vae: ['4', 2] } },
    '9': { class_type: 'SaveImage', inputs: { filename_prefix: 'ComfyUI', images: ['8', 0] } },
    ...extra,
  };
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

describe('ComfyUIExecutor against the ComfyUI stand-in', () => {
  let standin: ComfyStandin;
  let exec: ComfyUIExecutor;

  before(async () => {
    standin = await startComfyStandin({ tickDelayMs: 2 });
    exec = new ComfyUIExecutor({ baseUrl: standin.url, clientId: 'gantry-test', interruptWaitMs: 3000, historyPollMs: 25 });
  });
  after(async () => {
    await exec.close();
    await standin.close();
    await rm(tmpRoot, { recursive: true, force: true });
  });

  test('txt2img completes with step progress and a PNG output', async () => {
    standin.options.tickDelayMs = 2;
    const { ctx, ticks } = await prepared(makeCtx(txt2img(20)));
    const result = await exec.run(ctx);

    assert.equal(result.outputs.length, 1);
    const out = result.outputs[0]!;
    assert.match(out.name, /^ComfyUI_\d{5}_\.png$/);
    assert.equal(out.contentType, 'image/png');
    const bytes = await readFile(out.localPath);
    assert.equal(out.size, bytes.length);
    const info = inspectPng(bytes);
    assert.equal(info.width, 96);
    assert.equal(info.height, 64);

    const samplerTicks = ticks.filter((t) => t.current_node === '3 (KSampler)' && t.step_total === 20);
    assert.deepEqual(
      samplerTicks.map((t) => t.step_current).filter((s) => s > 0),
      Array.from({ length: 20 }, (_, i) => i + 1),
    );
    for (let i = 1; i < ticks.length; i++) assert.ok(ticks[i]!.progress >= ticks[i - 1]!.progress, 'progress never goes backwards');
    assert.ok(ticks.every((t) => t.progress >= 0 && t.progress <= 1));
    assert.equal(ticks.at(-1)!.progress, 1);
    assert.ok(ticks.some((t) => t.current_node === '9 (SaveImage)'));

    const sent = standin.received.prompts.at(-1)!;
    assert.match(sent.client_id ?? '', /^gantry-test-/);
    assert.deepEqual(sent.prompt, txt2img(20));
    const hist = standin.history.get(sent.prompt_id)!;
    assert.equal(hist.status.status_str, 'success');
  });

  test('a second identical run gets cached nodes and still returns the new image', async () => {
    const { ctx } = await prepared(makeCtx(txt2img(20)));
    const res = await exec.run(ctx);
    assert.equal(res.outputs.length, 1);
    const last = standin.received.prompts.at(-1)!;
    const cachedMsg = standin.history.get(last.prompt_id)!.status.messages.find(([t]) => t === 'execution_cached')!;
    assert.ok((cachedMsg[1].nodes as string[]).includes('3'));
  });

  test('cancel mid-run sends /interrupt and rejects with cancelled', async () => {
    standin.options.tickDelayMs = 20;
    const ac = new AbortController();
    const { ctx } = await prepared(makeCtx(txt2img(500), { signal: ac.signal }));
    const interruptsBefore = standin.received.interrupts;
    const firstProgress = standin.waitFor<{ value: number }>('progress', (d) => d.value >= 2);
    const run = exec.run(ctx);
    await firstProgress;
    ac.abort();
    const err = await rejection(run);
    assert.equal(err.code, 'cancelled');
    assert.equal(standin.received.interrupts, interruptsBefore + 1);
    const promptId = standin.received.prompts.at(-1)!.prompt_id;
    assert.deepEqual(standin.received.interruptBodies.at(-1), { prompt_id: promptId });
    const hist = standin.history.get(promptId)!;
    assert.equal(hist.status.status_str, 'error');
    assert.ok(hist.status.messages.some(([t]) => t === 'execution_interrupted'));
    standin.options.tickDelayMs = 2;
  });

  test("execution_error fails the task with ComfyUI's exception_message", async () => {
    const graph = {
      ...txt2img(3),
      '20': { class_type: 'FailNode', inputs: { images: ['8', 0], message: 'CUDA out of memory. Tried to allocate 2.00 GiB' } },
    };
    delete (graph as Record<string, unknown>)['9'];
    const { ctx } = await prepared(makeCtx(graph));
    const err = await rejection(exec.run(ctx));
    assert.equal(err.code, 'tool_error');
    assert.match(err.message, /CUDA out of memory\. Tried to allocate 2\.00 GiB/);
    assert.match(err.message, /node 20 \(FailNode\)/);
    assert.equal(err.details?.exception_type, 'RuntimeError');
  });

  test('failNodeId makes an ordinary node raise', async () => {
    standin.options.failNodeId = '8';
    standin.options.failMessage = 'VAE decode exploded';
    try {
      const { ctx } = await prepared(makeCtx(txt2img(2, { '5': { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } } })));
      const err = await rejection(exec.run(ctx));
      assert.equal(err.code, 'tool_error');
      assert.match(err.message, /VAE decode exploded/);
      assert.match(err.message, /node 8 \(VAEDecode\)/);
    } finally {
      delete standin.options.failNodeId;
    }
  });

  test('file input is uploaded via /upload/image and the graph input rewritten', async () => {
    const { ctx, workDir } = await prepared(
      makeCtx(
        {
          '10': { class_type: 'LoadImage', inputs: { image: 'placeholder.png' } },
          '11': { class_type: 'SaveImage', inputs: { filename_prefix: 'gantry/img2img', images: ['10', 0] } },
        },
        {},
      ),
    );
    const src = path.join(workDir, 'in.png');
    const bytes = renderSeededPng('input-image');
    await writeFile(src, bytes);
    ctx.inputFiles.push({ key: 'image', fileKey: 'fk_1', fileName: 'photo.png', localPath: src, nodeId: '10', field: 'image' });

    const res = await exec.run(ctx);
    const up = standin.received.uploads.at(-1)!;
    assert.ok(up.bytes.equals(bytes));
    assert.equal(up.overwrite, 'true');
    assert.equal(up.type, 'input');
    assert.match(up.name, /photo\.png$/);
    const sent = standin.received.prompts.at(-1)!;
    assert.equal(sent.prompt['10']!.inputs.image, up.name);
    assert.equal(res.outputs.length, 1);
    assert.match(res.outputs[0]!.name, /^img2img_\d{5}_\.png$/);
    inspectPng(await readFile(res.outputs[0]!.localPath));
    // the caller's workflow object is not mutated
    assert.equal((ctx.workflow as Record<string, { inputs: Record<string, unknown> }>)['10']!.inputs.image, 'placeholder.png');
  });

  test('an invalid graph is rejected as bad_input with ComfyUI’s message', async () => {
    const { ctx } = await prepared(makeCtx({ ...txt2img(2), '12': { class_type: 'NoSuchNode', inputs: {} } }));
    const err = await rejection(exec.run(ctx));
    assert.equal(err.code, 'bad_input');
    assert.match(err.message, /Cannot execute because node NoSuchNode does not exist\./);

    const { ctx: ctx2 } = await prepared(makeCtx(txt2img(2, { '4': { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'missing.safetensors' } } })));
    const err2 = await rejection(exec.run(ctx2));
    assert.equal(err2.code, 'bad_input');
    assert.match(err2.message, /Prompt outputs failed validation/);
    assert.match(err2.message, /node 4 \(CheckpointLoaderSimple\): Value not in list: ckpt_name: 'missing\.safetensors'/);
  });

  test('falls back to polling /history when the WebSocket drops mid-run', async () => {
    standin.options.tickDelayMs = 5;
    const { ctx, logs } = await prepared(makeCtx(txt2img(40, { '5': { class_type: 'EmptyLatentImage', inputs: { width: 72, height: 72, batch_size: 2 } } })));
    const dropped = standin.waitFor<{ value: number }>('progress', (d) => d.value === 3).then(() => standin.dropSockets());
    const res = await exec.run(ctx);
    await dropped;
    assert.ok(logs.some((l) => l.includes('websocket lost')));
    assert.equal(res.outputs.length, 2, 'batch of two images');
    for (const o of res.outputs) assert.equal(inspectPng(await readFile(o.localPath)).width, 72);
    standin.options.tickDelayMs = 2;
  });

  test('cancelling a prompt that is still queued deletes it from the queue without /interrupt', async () => {
    standin.options.tickDelayMs = 10;
    const blocker = await prepared(makeCtx(txt2img(60, { '6': { class_type: 'CLIPTextEncode', inputs: { text: 'blocker', clip: ['4', 1] } } })));
    const blockerRun = exec.run(blocker.ctx);
    await standin.waitFor('progress');
    const ac = new AbortController();
    const queued = await prepared(makeCtx(txt2img(5, { '6': { class_type: 'CLIPTextEncode', inputs: { text: 'queued', clip: ['4', 1] } } }), { signal: ac.signal }));
    const interruptsBefore = standin.received.interrupts;
    const queuedPrompt = standin.waitFor('prompt');
    const queuedRun = exec.run(queued.ctx);
    await queuedPrompt;
    ac.abort();
    const err = await rejection(queuedRun);
    assert.equal(err.code, 'cancelled');
    assert.equal(standin.received.interrupts, interruptsBefore);
    assert.ok(standin.received.queueDeletes.includes(standin.received.prompts.at(-1)!.prompt_id));
    await blockerRun;
    standin.options.tickDelayMs = 2;
  });

  test('getSystemStats returns ComfyUI’s shape', async () => {
    const s = await exec.getSystemStats();
    assert.equal(typeof s.system.ram_total, 'number');
    assert.equal(typeof s.system.comfyui_version, 'string');
    assert.equal(s.devices[0]!.type, 'cuda');
    assert.equal(typeof s.devices[0]!.vram_total, 'number');
  });
});

describe('ComfyUIExecutor against an older ComfyUI (no execution_success)', () => {
  test('completes on executing {node: null} and reads status from /history', async () => {
    const standin = await startComfyStandin({ tickDelayMs: 1, legacy: true });
    const exec = new ComfyUIExecutor({ baseUrl: standin.url });
    try {
      const { ctx, ticks } = await prepared(makeCtx(txt2img(5)));
      const res = await exec.run(ctx);
      assert.equal(res.outputs.length, 1);
      assert.ok(ticks.some((t) => t.step_total === 5 && t.step_current === 5));
      assert.ok(!standin.history.get(standin.received.prompts[0]!.prompt_id)!.status.messages.some(([t]) => t === 'execution_success'));
    } finally {
      await exec.close();
      await standin.close();
    }
  });

  test('an unreachable ComfyUI is a tool_error', async () => {
    const exec = new ComfyUIExecutor({ baseUrl: 'http://127.0.0.1:9', wsConnectTimeoutMs: 1000 });
    const { ctx } = await prepared(makeCtx(txt2img(1)));
    const err = await rejection(exec.run(ctx));
    assert.equal(err.code, 'tool_error');
  });
});
