/**
 * Issue 25: the comfyui executor against failure modes found on real ComfyUI, each reproduced by
 * the stand-in (test/fixtures/comfyui-standin.ts, written from server.py / execution.py / main.py /
 * comfy_execution): lost POST /prompt answers, 200 with node_errors, ExecutionBlocker errors, restarts
 * and cleared queues, a killed process, every output kind, full caching, targeted cancel, node
 * expansion. The last block checks that the stand-in itself behaves as the real server does.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { ComfyUIExecutor } from '../../src/agent/executors/comfyui.js';
import { ExecutorError, type ExecContext, type ProgressTick } from '../../src/agent/executors/types.js';
import { inspectPng } from '../../src/agent/png.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';

const tmpRoot = await mkdtemp(path.join(os.tmpdir(), 'gantry-comfy-25-'));
let seq = 0;

async function makeCtx(workflow: unknown, signal?: AbortSignal) {
  const ticks: ProgressTick[] = [];
  const logs: string[] = [];
  const workDir = path.join(tmpRoot, `task-${++seq}`);
  await mkdir(workDir, { recursive: true });
  const ctx: ExecContext = {
    taskId: `task_${seq}`,
    attempt: 1,
    toolType: 'comfyui',
    workflow,
    parameters: {},
    inputFiles: [],
    workDir,
    signal: signal ?? new AbortController().signal,
    onProgress: (t) => ticks.push(t),
    log: (m) => logs.push(m),
  };
  return { ctx, ticks, logs };
}

function txt2img(steps: number, text: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    '3': {
      class_type: 'KSampler',
      inputs: { seed: 7, steps, cfg: 8, sampler_name: 'euler', scheduler: 'normal', denoise: 1, model: ['4', 0], positive: ['6', 0], negative: ['7', 0], latent_image: ['5', 0] },
    },
    '4': { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'v1-5-pruned-emaonly.safetensors' } },
    '5': { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } },
    '6': { class_type: 'CLIPTextEncode', inputs: { text, clip: ['4', 1] } },
    '7': { class_type: 'CLIPTextEncode', inputs: { text: 'watermark', clip: ['4', 1] } },
    '8': { class_type: 'VAEDecode', inputs: { samples: ['3', 0], vae: ['4', 2] } },
    '9': { class_type: 'SaveImage', inputs: { filename_prefix: 'ComfyUI', images: ['8', 0] } },
    ...extra,
  };
}

async function rejection(p: Promise<unknown>, boundMs = 20_000): Promise<ExecutorError> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the run did not end within ${boundMs} ms`)), boundMs);
  });
  try {
    await Promise.race([p, bound]);
  } catch (e) {
    if (!(e instanceof ExecutorError)) throw e;
    return e;
  } finally {
    clearTimeout(timer);
  }
  assert.fail('expected the run to fail');
}

/** Another ComfyUI client (a person in the ComfyUI web UI): queues a prompt under its own client id. */
async function otherClientQueues(standin: ComfyStandin, graph: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${standin.url}/prompt`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: graph, client_id: 'someone-else' }) });
  assert.equal(res.status, 200);
  return ((await res.json()) as { prompt_id: string }).prompt_id;
}

async function freePort(): Promise<number> {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** The stand-in as a real process (node --import tsx test/fixtures/comfyui-standin.ts --port N). */
async function spawnStandin(port: number, dataDir: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/comfyui-standin.ts', '--port', String(port), '--tick-ms', '40', '--data-dir', dataDir], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`stand-in did not start: ${out}`)), 30_000);
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('listening on')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    child.on('exit', (code) => reject(new Error(`stand-in exited ${code}: ${out}`)));
  });
  return child;
}

after(async () => {
  await rm(tmpRoot, { recursive: true, force: true });
});

describe('comfyui executor: issue 25 failure modes', () => {
  let standin: ComfyStandin;
  let exec: ComfyUIExecutor;
  before(async () => {
    standin = await startComfyStandin({ tickDelayMs: 2 });
    exec = new ComfyUIExecutor({ baseUrl: standin.url, clientId: 'gantry-25', historyPollMs: 25, livenessTimeoutMs: 800, livenessCheckMs: 100, interruptWaitMs: 3000 });
  });
  after(async () => {
    await exec.close();
    await standin.close();
  });

  test('submit: a POST /prompt answered after the submit timeout is found by its prompt_id and runs once', async () => {
    const slow = new ComfyUIExecutor({ baseUrl: standin.url, submitTimeoutMs: 300, historyPollMs: 25, livenessTimeoutMs: 3000 });
    standin.faults.promptAnswerDelayMs = 1500;
    try {
      const { ctx, logs } = await makeCtx(txt2img(5, 'slow answer'));
      const res = await slow.run(ctx);
      assert.equal(res.outputs.length, 1);
      const sent = standin.received.prompts.at(-1)!;
      assert.match(String(sent.body.prompt_id), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, 'the client chose a canonical UUID');
      assert.equal(standin.received.prompts.filter((p) => p.prompt_id === sent.prompt_id).length, 1, 'submitted once');
      assert.equal(standin.history.get(sent.prompt_id)?.status.status_str, 'success');
      assert.equal([...standin.history.values()].filter((h) => (h.prompt[2]['6']!.inputs.text as string) === 'slow answer').length, 1, 'ComfyUI ran it once');
      assert.ok(logs.some((l) => l.includes('looked up the prompt')));
    } finally {
      standin.faults.promptAnswerDelayMs = 0;
      await slow.close();
    }
  });

  test('submit: a POST /prompt whose connection died unread is resubmitted with the same prompt_id', async () => {
    standin.faults.dropPromptRequests = 1;
    const { ctx } = await makeCtx(txt2img(3, 'dropped once'));
    const res = await exec.run(ctx);
    assert.equal(res.outputs.length, 1);
    assert.equal(standin.received.droppedPrompts >= 1, true);
    const id = standin.received.prompts.at(-1)!.prompt_id;
    assert.equal(standin.received.prompts.filter((p) => p.prompt_id === id).length, 1);
  });

  test('a 200 with node_errors fails bad_input naming the dropped node and removes the prompt', async () => {
    standin.options.tickDelayMs = 20;
    try {
      // node 12 misses its images input: ComfyUI drops that output ("Output will be ignored") and runs 9
      const graph = txt2img(40, 'partial', { '12': { class_type: 'SaveImage', inputs: { filename_prefix: 'dropped' } } });
      const { ctx } = await makeCtx(graph);
      const err = await rejection(exec.run(ctx));
      assert.equal(err.code, 'bad_input');
      assert.match(err.message, /node 12 \(SaveImage\): Required input is missing: images/);
      const id = standin.received.prompts.at(-1)!.prompt_id;
      assert.ok(standin.received.queueDeletes.includes(id), 'POST /queue {delete: [id]}');
      assert.ok(standin.received.interruptBodies.some((b) => JSON.stringify(b) === JSON.stringify({ prompt_id: id })), 'POST /interrupt {prompt_id}');
      await settled(standin, id);
      assert.notEqual(standin.history.get(id)?.status.status_str, 'success', 'the rest of the prompt did not run to completion');
    } finally {
      standin.options.tickDelayMs = 2;
    }
  });

  test('an ExecutionBlocker execution_error does not end the prompt: the end comes from history', async () => {
    // 2 blocks with a message; 1 (fed by 2) reports it while the prompt goes on to 9
    const graph = txt2img(4, 'blocked branch', {
      '2': { class_type: 'TestExecutionBlockerNode', inputs: { input: ['8', 0], block: true, verbose: true } },
      '1': { class_type: 'SaveImage', inputs: { filename_prefix: 'blocked', images: ['2', 0] } },
    });
    const blockedMsg = standin.waitFor<{ exception_type: string; node_id: string }>('execution_error', (d) => d.exception_type === 'ExecutionBlocked');
    const { ctx } = await makeCtx(graph);
    const res = await exec.run(ctx);
    const msg = await blockedMsg;
    assert.equal(msg.node_id, '1');
    assert.deepEqual(res.outputs.map((o) => o.name.replace(/_\d{5}_/, '_N_')), ['ComfyUI_N_.png']);
    const hist = standin.history.get(standin.received.prompts.at(-1)!.prompt_id)!;
    assert.equal(hist.status.status_str, 'success');
    assert.ok(!hist.status.messages.some(([t]) => t === 'execution_error'), 'the blocker message is not in history');
  });

  test('liveness: a ComfyUI restart (history and queue lost) ends the attempt with a retryable tool_error', async (t) => {
    standin.options.tickDelayMs = 20;
    try {
      const { ctx } = await makeCtx(txt2img(300, 'restart me'));
      const run = exec.run(ctx);
      await standin.waitFor<{ value: number }>('progress', (d) => d.value >= 2);
      const t0 = Date.now();
      await standin.restart();
      const err = await rejection(run, 10_000);
      assert.equal(err.code, 'tool_error', 'tool_error: the task actor retries it while retries remain');
      assert.match(err.message, /neither running, pending nor in history/);
      assert.match(err.message, /restarted/);
      assert.ok(Date.now() - t0 < 5000, `ended ${Date.now() - t0} ms after the restart`);
      t.diagnostic(`liveness 800 ms: the attempt ended ${Date.now() - t0} ms after the restart`);
    } finally {
      standin.options.tickDelayMs = 2;
    }
  });

  test('liveness: another client clearing the queue ends our pending attempt', async () => {
    standin.options.tickDelayMs = 20;
    try {
      const theirs = await otherClientQueues(standin, txt2img(80, 'their long job'));
      const { ctx } = await makeCtx(txt2img(3, 'ours, pending'));
      const queued = standin.waitFor('prompt', (p: { client_id?: string }) => (p.client_id ?? '').startsWith('gantry-25'));
      const run = exec.run(ctx);
      await queued;
      const clear = await fetch(`${standin.url}/queue`, { method: 'POST', body: JSON.stringify({ clear: true }) });
      assert.equal(clear.status, 200);
      const err = await rejection(run, 10_000);
      assert.equal(err.code, 'tool_error');
      assert.match(err.message, /neither running, pending nor in history/);
      await standin.waitFor('executing', (d: { node: unknown; prompt_id: string }) => d.node === null && d.prompt_id === theirs, 15_000).catch(() => undefined);
    } finally {
      standin.options.tickDelayMs = 2;
    }
  });

  test('abortAll ends in-flight runs with a tool_error naming the reason', async () => {
    standin.options.tickDelayMs = 20;
    try {
      const { ctx } = await makeCtx(txt2img(200, 'abort all'));
      const run = exec.run(ctx);
      await standin.waitFor<{ value: number }>('progress', (d) => d.value >= 1);
      assert.equal(exec.abortAll('the ComfyUI process exited (code 137)'), 1);
      const err = await rejection(run);
      assert.equal(err.code, 'tool_error');
      assert.match(err.message, /exited \(code 137\)/);
      await fetch(`${standin.url}/interrupt`, { method: 'POST' });
    } finally {
      standin.options.tickDelayMs = 2;
    }
  });

  test('cancel removes only our prompt: another client running is not interrupted (a body-less interrupt would)', async () => {
    standin.options.tickDelayMs = 10;
    try {
      const interruptsBefore = standin.received.interruptBodies.length;
      // theirs runs, ours waits behind it; cancel ours
      const theirs = await otherClientQueues(standin, txt2img(40, 'theirs keeps running'));
      await standin.waitFor<{ prompt_id: string }>('progress', (d) => d.prompt_id === theirs);
      const ac = new AbortController();
      const { ctx } = await makeCtx(txt2img(3, 'ours cancelled while pending'), ac.signal);
      const queued = standin.waitFor('prompt', (p: { client_id?: string }) => (p.client_id ?? '').startsWith('gantry-25'));
      const run = exec.run(ctx);
      const ours = ((await queued) as { prompt_id: string }).prompt_id;
      ac.abort();
      assert.equal((await rejection(run)).code, 'cancelled');
      assert.ok(standin.received.queueDeletes.includes(ours));
      // ours running, theirs pending behind: cancel ours
      const ac2 = new AbortController();
      const { ctx: ctx2 } = await makeCtx(txt2img(300, 'ours cancelled while running'), ac2.signal);
      const run2 = exec.run(ctx2);
      const ours2 = ((await standin.waitFor('prompt', (p: { client_id?: string }) => (p.client_id ?? '').startsWith('gantry-25'))) as { prompt_id: string }).prompt_id;
      const theirs2 = await otherClientQueues(standin, txt2img(5, 'theirs queued behind'));
      await standin.waitFor<{ prompt_id: string; value: number }>('progress', (d) => d.prompt_id === ours2 && d.value >= 1, 15_000);
      ac2.abort();
      assert.equal((await rejection(run2)).code, 'cancelled');
      const bodies = standin.received.interruptBodies.slice(interruptsBefore);
      assert.ok(bodies.length >= 1);
      for (const b of bodies) assert.deepEqual(b, { prompt_id: ours2 }, 'only targeted interrupts');
      await standin.waitFor('executing', (d: { node: unknown; prompt_id: string }) => d.node === null && d.prompt_id === theirs2, 15_000);
      assert.equal(standin.history.get(theirs)!.status.status_str, 'success', 'their running prompt was not interrupted');
      assert.equal(standin.history.get(theirs2)!.status.status_str, 'success', 'their pending prompt ran');
      assert.ok(standin.history.get(ours2)!.status.messages.some(([t]) => t === 'execution_interrupted'));

      // what a body-less interrupt does (server.py post_interrupt: global): it stops their prompt too
      const theirs3 = await otherClientQueues(standin, txt2img(200, 'theirs, globally interrupted'));
      await standin.waitFor<{ prompt_id: string }>('progress', (d) => d.prompt_id === theirs3);
      await fetch(`${standin.url}/interrupt`, { method: 'POST' });
      await standin.waitFor('execution_interrupted', (d: { prompt_id: string }) => d.prompt_id === theirs3, 10_000);
    } finally {
      standin.options.tickDelayMs = 2;
    }
  });

  test('progress with node expansion: ephemeral ids count as their display node; never backwards, never past 100%', async () => {
    const graph = txt2img(10, 'expanded sampler');
    graph['3'] = { ...(graph['3'] as Record<string, unknown>), class_type: 'TestNodeExpansionSampler' };
    const ephemeral = standin.waitFor<{ node: string; display_node: string }>('executing', (d) => d.node === '3.0.0.1');
    const { ctx, ticks } = await makeCtx(graph);
    await exec.run(ctx);
    assert.equal((await ephemeral).display_node, '3', 'the stand-in ran an ephemeral node');
    for (let i = 1; i < ticks.length; i++) assert.ok(ticks[i]!.progress >= ticks[i - 1]!.progress, `tick ${i} went backwards`);
    assert.ok(ticks.every((t) => t.progress >= 0 && t.progress <= 1));
    const sampler = ticks.filter((t) => t.step_total === 10 && t.step_current > 0);
    assert.deepEqual(sampler.map((t) => t.step_current), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert.ok(sampler.every((t) => t.current_node === '3 (TestNodeExpansionSampler)'), 'ephemeral ticks are labelled with the display node');
    // 7 graph nodes: while the last one (9) runs, 6 are done; the ephemeral node is not an 8th
    const atSave = ticks.find((t) => t.current_node === '9 (SaveImage)')!;
    assert.ok(Math.abs(atSave.progress - 6 / 7) < 1e-9, `progress at the last node: ${atSave.progress}`);
    assert.equal(ticks.at(-1)!.progress, 1);
  });
});

/** Waits (bounded) until ComfyUI has neither running nor pending `id` (GET /api/jobs/{id}: 404 or a final status). */
async function settled(standin: ComfyStandin, id: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const r = await fetch(`${standin.url}/api/jobs/${id}`);
    const body = (await r.json()) as { status?: string };
    if (r.status === 404 || (body.status !== 'pending' && body.status !== 'in_progress')) return;
    if (Date.now() > deadline) assert.fail(`prompt ${id} still ${body.status}`);
    await new Promise((res) => setTimeout(res, 20));
  }
}

describe('comfyui executor: output kinds and full caching', () => {
  let standin: ComfyStandin;
  let exec: ComfyUIExecutor;
  before(async () => {
    standin = await startComfyStandin({ tickDelayMs: 1 });
    exec = new ComfyUIExecutor({ baseUrl: standin.url, historyPollMs: 25, livenessTimeoutMs: 2000 });
  });
  after(async () => {
    await exec.close();
    await standin.close();
  });

  const graph = (): Record<string, unknown> =>
    txt2img(3, 'every kind', {
      '10': { class_type: 'SaveAudio', inputs: { audio: ['8', 0], filename_prefix: 'audio/ComfyUI' } },
      '11': { class_type: 'SaveVideo', inputs: { video: ['8', 0], filename_prefix: 'video/ComfyUI' } },
      '12': { class_type: 'VHS_VideoCombine', inputs: { images: ['8', 0], frame_rate: 8, filename_prefix: 'AnimateDiff' } },
      '13': { class_type: 'SaveGLB', inputs: { mesh: ['8', 0], filename_prefix: 'mesh/ComfyUI' } },
      '14': { class_type: 'Preview3D', inputs: { model_file: '3d/model.glb' } },
      '15': { class_type: 'PreviewAny', inputs: { source: 'a caption from the text node' } },
      '16': { class_type: 'PreviewImage', inputs: { images: ['8', 0] } },
    });

  test('images, audio, video, gifs, 3d, path-valued results and text reach the outputs; temp previews do not', async () => {
    mkdirSync(path.join(standin.dataDir, 'output', '3d'), { recursive: true });
    const glb = Buffer.concat([Buffer.from('glTF'), Buffer.from([2, 0, 0, 0]), Buffer.alloc(4)]);
    writeFileSync(path.join(standin.dataDir, 'output', '3d', 'model.glb'), glb);
    const { ctx } = await makeCtx(graph());
    const res = await exec.run(ctx);
    const byName = new Map(res.outputs.map((o) => [o.name, o]));
    assert.deepEqual(
      res.outputs.map((o) => o.name).sort(),
      ['15_text.txt', 'AnimateDiff_00001_.webp', 'ComfyUI_00001_.flac', 'ComfyUI_00001_.glb', 'ComfyUI_00001_.mp4', 'ComfyUI_00001_.png', 'model.glb'].sort(),
    );
    assert.equal(res.outputs[0]!.name, 'ComfyUI_00001_.png', 'the image of the first output node is the primary output');
    inspectPng(await readFile(byName.get('ComfyUI_00001_.png')!.localPath));
    assert.equal(byName.get('ComfyUI_00001_.flac')!.contentType, 'audio/flac');
    assert.equal(byName.get('ComfyUI_00001_.mp4')!.contentType, 'video/mp4');
    assert.ok((await readFile(byName.get('model.glb')!.localPath)).equals(glb), 'Preview3D {"result": [path, camera]} is fetched from the output folder');
    assert.equal(await readFile(byName.get('15_text.txt')!.localPath, 'utf8'), 'a caption from the text node');
    assert.equal(byName.get('15_text.txt')!.contentType, 'text/plain');
    assert.ok(!res.outputs.some((o) => o.name.startsWith('ComfyUI_temp_')), 'the PreviewImage temp file is not an output');
    assert.ok(readdirSync(path.join(standin.dataDir, 'temp')).some((f) => f.startsWith('ComfyUI_temp_')), 'the stand-in did write the temp preview');
  });

  test('an identical re-run is cached node for node (SaveImage too, no new file) and still returns every output', async () => {
    const outDir = path.join(standin.dataDir, 'output');
    const filesBefore = readdirSync(outDir, { recursive: true }).length;
    const { ctx } = await makeCtx(graph());
    const res = await exec.run(ctx);
    const id = standin.received.prompts.at(-1)!.prompt_id;
    const cached = standin.history.get(id)!.status.messages.find(([t]) => t === 'execution_cached')![1].nodes as string[];
    for (const n of ['3', '8', '9', '10', '13', '15']) assert.ok(cached.includes(n), `node ${n} cached`);
    assert.equal(readdirSync(outDir, { recursive: true }).length, filesBefore, 'no new file written');
    assert.deepEqual(
      res.outputs.map((o) => o.name).sort(),
      ['15_text.txt', 'AnimateDiff_00001_.webp', 'ComfyUI_00001_.flac', 'ComfyUI_00001_.glb', 'ComfyUI_00001_.mp4', 'ComfyUI_00001_.png', 'model.glb'].sort(),
    );
  });
});

describe('comfyui executor: an older ComfyUI (no /api/jobs, no execution_success)', () => {
  test('liveness and completion fall back to GET /queue + GET /history/{id}', async () => {
    const standin = await startComfyStandin({ tickDelayMs: 5, legacy: true });
    const exec = new ComfyUIExecutor({ baseUrl: standin.url, historyPollMs: 25, livenessTimeoutMs: 800, livenessCheckMs: 30 });
    try {
      const jobs = await fetch(`${standin.url}/api/jobs/${crypto.randomUUID()}`);
      assert.equal(jobs.status, 404);
      assert.equal(await jobs.text(), '404: Not Found', "aiohttp's plain 404: no jobs route");
      const { ctx } = await makeCtx(txt2img(20, 'legacy ok'));
      assert.equal((await exec.run(ctx)).outputs.length, 1, 'lookups during the run (every 30 ms) found it running');
      standin.options.tickDelayMs = 20;
      const { ctx: ctx2 } = await makeCtx(txt2img(300, 'legacy restart'));
      const run = exec.run(ctx2);
      await standin.waitFor<{ value: number }>('progress', (d) => d.value >= 2);
      await standin.restart();
      const err = await rejection(run, 10_000);
      assert.equal(err.code, 'tool_error');
      assert.match(err.message, /lost prompt .*neither running, pending nor in history/);
    } finally {
      await exec.close();
      await standin.close();
    }
  });
});

describe('comfyui executor: the ComfyUI process dies', () => {
  test('killed mid-run (not managed): the attempt ends within the liveness timeout; restarted on the same port: the prompt is reported lost', async (t) => {
    const port = await freePort();
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'comfy-proc-'));
    let child = await spawnStandin(port, dataDir);
    const exec = new ComfyUIExecutor({ baseUrl: `http://127.0.0.1:${port}`, historyPollMs: 50, livenessTimeoutMs: 1500, livenessCheckMs: 200 });
    try {
      const { ctx, ticks } = await makeCtx(txt2img(500, 'killed'));
      const run = exec.run(ctx);
      const deadline = Date.now() + 20_000;
      while (!ticks.some((t) => t.step_current >= 1) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.ok(ticks.some((t) => t.step_current >= 1), 'the run was sampling');
      const t0 = Date.now();
      child.kill('SIGKILL');
      await once(child, 'exit');
      const err = await rejection(run, 15_000);
      const took = Date.now() - t0;
      assert.equal(err.code, 'tool_error');
      assert.match(err.message, /unreachable/);
      assert.ok(took < 1500 + 3000, `ended ${took} ms after the kill`);
      t.diagnostic(`liveness 1500 ms: the attempt ended ${took} ms after SIGKILL`);

      // a real restart: a new process on the same port knows nothing of the old prompt
      child = await spawnStandin(port, dataDir);
      const exec2 = new ComfyUIExecutor({ baseUrl: `http://127.0.0.1:${port}`, historyPollMs: 50, livenessTimeoutMs: 8000, livenessCheckMs: 200 });
      try {
        const { ctx: ctx2, ticks: ticks2 } = await makeCtx(txt2img(500, 'restarted'));
        const run2 = exec2.run(ctx2);
        while (!ticks2.some((t) => t.step_current >= 1) && Date.now() < deadline + 20_000) await new Promise((r) => setTimeout(r, 20));
        child.kill('SIGKILL');
        await once(child, 'exit');
        child = await spawnStandin(port, dataDir);
        const t1 = Date.now();
        const err2 = await rejection(run2, 30_000);
        t.diagnostic(`liveness 8000 ms: the attempt ended ${Date.now() - t1} ms after the new process was up`);
        assert.equal(err2.code, 'tool_error');
        assert.match(err2.message, /lost prompt .*neither running, pending nor in history/);
      } finally {
        await exec2.close();
      }
    } finally {
      child.kill('SIGKILL');
      await exec.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe('the ComfyUI stand-in follows the real server', () => {
  let standin: ComfyStandin;
  before(async () => {
    standin = await startComfyStandin({ tickDelayMs: 5, historyDelayMs: 30 });
  });
  after(async () => {
    await standin.close();
  });

  const post = (p: string, body: unknown): Promise<Response> => fetch(`${standin.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  test('POST /prompt: a prompt_id must be a canonical UUID (400 invalid_prompt_id); a known one is refused with 409', async () => {
    const bad = await post('/prompt', { prompt: txt2img(1, 'x'), prompt_id: 'not-a-uuid' });
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: { type: string } }).error.type, 'invalid_prompt_id');
    const upper = await post('/prompt', { prompt: txt2img(1, 'x'), prompt_id: crypto.randomUUID().toUpperCase() });
    assert.equal(upper.status, 400);
    const id = crypto.randomUUID();
    assert.equal((await post('/prompt', { prompt: txt2img(1, 'dup'), prompt_id: id })).status, 200);
    const dup = await post('/prompt', { prompt: txt2img(1, 'dup'), prompt_id: id });
    assert.equal(dup.status, 409);
    assert.deepEqual(await dup.json(), { error: 'prompt_id already exists' });
    const none = await post('/prompt', { number: 1 });
    assert.equal(none.status, 400);
    assert.equal(((await none.json()) as { error: { type: string } }).error.type, 'no_prompt');
  });

  test('POST /prompt: 200 with node_errors when one output validates, 400 when none does', async () => {
    const partial = await post('/prompt', { prompt: txt2img(1, 'p', { '12': { class_type: 'SaveImage', inputs: { filename_prefix: 'x' } } }) });
    assert.equal(partial.status, 200);
    const body = (await partial.json()) as { prompt_id: string; node_errors: Record<string, { class_type: string; dependent_outputs: string[] }> };
    assert.deepEqual(Object.keys(body.node_errors), ['12']);
    assert.deepEqual(body.node_errors['12']!.dependent_outputs, ['12']);
    const queued = standin.received.prompts.at(-1)!;
    assert.equal(queued.prompt_id, body.prompt_id);
    const none = await post('/prompt', { prompt: { '12': { class_type: 'SaveImage', inputs: { filename_prefix: 'x' } } } });
    assert.equal(none.status, 400);
    assert.equal(((await none.json()) as { error: { type: string } }).error.type, 'prompt_outputs_failed_validation');
  });

  test('execution_success comes before the history entry, then executing {node: null}; GET /api/jobs/{id} follows jobs.py', async () => {
    const id = crypto.randomUUID();
    assert.equal((await fetch(`${standin.url}/api/jobs/${id}`)).status, 404);
    assert.equal((await fetch(`${standin.url}/jobs/${id}`)).status, 404, 'the jobs route only exists under /api');
    const seen: string[] = [];
    const success = standin.waitFor('execution_success', (d: { prompt_id: string }) => d.prompt_id === id).then(() => seen.push(`success:${standin.history.has(id)}`));
    const end = standin.waitFor('executing', (d: { node: unknown; prompt_id: string }) => d.node === null && d.prompt_id === id).then(() => seen.push(`end:${standin.history.has(id)}`));
    standin.options.tickDelayMs = 30;
    assert.equal((await post('/prompt', { prompt: txt2img(8, 'jobs'), prompt_id: id, client_id: 'c1' })).status, 200);
    await standin.waitFor('progress', (d: { prompt_id: string }) => d.prompt_id === id);
    const running = (await (await fetch(`${standin.url}/api/jobs/${id}`)).json()) as { status: string };
    assert.equal(running.status, 'in_progress');
    const id2 = crypto.randomUUID();
    await post('/prompt', { prompt: txt2img(1, 'jobs 2'), prompt_id: id2 });
    assert.equal(((await (await fetch(`${standin.url}/api/jobs/${id2}`)).json()) as { status: string }).status, 'pending');
    standin.options.tickDelayMs = 5;
    await Promise.all([success, end]);
    assert.deepEqual(seen, ['success:false', 'end:true']);
    const done = (await (await fetch(`${standin.url}/api/jobs/${id}`)).json()) as { status: string; outputs: Record<string, unknown> };
    assert.equal(done.status, 'completed');
    assert.ok(done.outputs['9']);
    // failed and cancelled
    const failId = crypto.randomUUID();
    await post('/prompt', { prompt: txt2img(1, 'f', { '20': { class_type: 'FailNode', inputs: { message: 'boom' } } }), prompt_id: failId });
    await settled(standin, failId);
    const failed = (await (await fetch(`${standin.url}/api/jobs/${failId}`)).json()) as { status: string; execution_error: { exception_message: string } };
    assert.equal(failed.status, 'failed');
    assert.match(failed.execution_error.exception_message, /boom/);
    const cancelId = crypto.randomUUID();
    standin.options.tickDelayMs = 20;
    await post('/prompt', { prompt: txt2img(100, 'c'), prompt_id: cancelId });
    await standin.waitFor('progress', (d: { prompt_id: string }) => d.prompt_id === cancelId);
    await post('/interrupt', { prompt_id: cancelId });
    await settled(standin, cancelId);
    assert.equal(((await (await fetch(`${standin.url}/api/jobs/${cancelId}`)).json()) as { status: string }).status, 'cancelled');
    standin.options.tickDelayMs = 5;
  });

  test('binary frames: type 1 previews by default, type 4 after feature_flags {supports_preview_metadata}, type 3 text', async () => {
    const frames = async (declare: boolean): Promise<number[]> => {
      const sid = `bin${declare ? 'meta' : 'plain'}${Date.now()}`;
      const ws = new WebSocket(`${standin.url.replace('http', 'ws')}/ws?clientId=${sid}`);
      const types: number[] = [];
      ws.on('message', (data, isBinary) => {
        if (isBinary) types.push((data as Buffer).readUInt32BE(0));
      });
      await once(ws, 'open');
      if (declare) ws.send(JSON.stringify({ type: 'feature_flags', data: { supports_preview_metadata: true } }));
      const id = crypto.randomUUID();
      const end = standin.waitFor('executing', (d: { node: unknown; prompt_id: string }) => d.node === null && d.prompt_id === id);
      await post('/prompt', { prompt: txt2img(3, `frames ${sid}`), prompt_id: id, client_id: sid });
      await end;
      ws.close();
      return types;
    };
    const plain = await frames(false);
    assert.ok(plain.includes(1) && !plain.includes(4) && plain.includes(3), JSON.stringify(plain));
    const meta = await frames(true);
    assert.ok(meta.includes(4) && !meta.includes(1) && meta.includes(3), JSON.stringify(meta));
  });

  test('restart(): sockets dropped, the running prompt gone without history, queue and history empty', async () => {
    standin.options.tickDelayMs = 20;
    const id = crypto.randomUUID();
    await post('/prompt', { prompt: txt2img(100, 'dies'), prompt_id: id });
    await standin.waitFor('progress', (d: { prompt_id: string }) => d.prompt_id === id);
    await standin.restart({ downMs: 50 });
    standin.options.tickDelayMs = 5;
    assert.deepEqual(await (await fetch(`${standin.url}/history/${id}`)).json(), {});
    assert.deepEqual(await (await fetch(`${standin.url}/queue`)).json(), { queue_running: [], queue_pending: [] });
    assert.equal((await fetch(`${standin.url}/api/jobs/${id}`)).status, 404);
  });

  test('standalone: an unknown flag is refused (exit 2), as argparse does', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/comfyui-standin.ts', '--no-such-flag'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    const [code] = (await once(child, 'exit')) as [number];
    assert.equal(code, 2);
    assert.match(err, /unrecognized arguments: --no-such-flag/);
  });
});
