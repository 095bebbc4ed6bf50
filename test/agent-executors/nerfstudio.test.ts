import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import { NerfstudioExecutor, TrainOutputParser, parseNerfstudioSpec } from '../../src/agent/executors/nerfstudio.js';
import { ExecutorError, type ExecContext, type InputFile, type ProgressTick } from '../../src/agent/executors/types.js';
import { renderSeededPng } from '../../src/agent/png.js';

const binDir = fileURLToPath(new URL('../fixtures/ns-bin/', import.meta.url));
const tmpRoot = await mkdtemp(path.join(os.tmpdir(), 'gantry-ns-test-'));
after(() => rm(tmpRoot, { recursive: true, force: true }));
let seq = 0;

async function makeCtx(workflow: unknown, inputs: { name: string; bytes?: Buffer }[], signal?: AbortSignal) {
  const workDir = path.join(tmpRoot, `task-${++seq}`);
  const inDir = path.join(tmpRoot, `in-${seq}`);
  await mkdir(workDir, { recursive: true });
  await mkdir(inDir, { recursive: true });
  const inputFiles: InputFile[] = [];
  for (const [i, f] of inputs.entries()) {
    const p = path.join(inDir, `${i}-${f.name}`);
    await writeFile(p, f.bytes ?? renderSeededPng(`img-${i}`, { width: 8, height: 8 }));
    inputFiles.push({ key: 'images', fileKey: `fk_${i}`, fileName: f.name, localPath: p, targetPath: 'process_data.data' });
  }
  const ticks: ProgressTick[] = [];
  const logs: string[] = [];
  const listeners: ((t: ProgressTick) => void)[] = [];
  const ctx: ExecContext = {
    taskId: `task_${seq}`,
    attempt: 1,
    toolType: 'nerfstudio',
    workflow,
    parameters: {},
    inputFiles,
    workDir,
    signal: signal ?? new AbortController().signal,
    onProgress: (t) => {
      ticks.push(t);
      for (const l of listeners) l(t);
    },
    log: (m) => logs.push(m),
  };
  const waitForTick = (pred: (t: ProgressTick) => boolean): Promise<ProgressTick> =>
    new Promise((resolve) => {
      const l = (t: ProgressTick): void => {
        if (pred(t)) {
          listeners.splice(listeners.indexOf(l), 1);
          resolve(t);
        }
      };
      listeners.push(l);
    });
  return { ctx, ticks, logs, workDir, waitForTick };
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

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z'; // a zombie is dead, just not reaped
  } catch {
    return existsSync(`/proc/${pid}`);
  }
}

async function waitDead(pid: number, timeoutMs = 3000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setImmediate(r));
  }
  return true;
}

describe('NerfstudioExecutor against the fake ns-* toolchain', () => {
  test('images -> splatfacto -> gaussian-splat: stages in order, parsed train steps, splat.ply output', async () => {
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '0' } });
    const { ctx, ticks, logs } = await makeCtx({ method: 'splatfacto', train: { max_num_iterations: 200 } }, [
      { name: 'a.png' },
      { name: 'b.png' },
      { name: 'c.png' },
    ]);
    const res = await exec.run(ctx);

    const order = ticks.map((t) => t.stage).filter((s, i, a) => s !== a[i - 1]);
    assert.deepEqual(order, ['download', 'process_data', 'train', 'export']);
    for (let i = 1; i < ticks.length; i++) assert.ok(ticks[i]!.progress >= ticks[i - 1]!.progress, `progress monotonic at tick ${i}`);
    assert.ok(ticks.every((t) => typeof t.message === 'string' && t.message.length > 0));

    const train = ticks.filter((t) => t.stage === 'train');
    const steps = train.map((t) => t.step_current);
    // LocalWriter logs steps 0,10,...,190 of 0..199; the executor closes the stage at 200/200.
    assert.deepEqual(steps.slice(1, -1), Array.from({ length: 20 }, (_, i) => i * 10));
    assert.equal(steps.at(-1), 200);
    assert.ok(train.every((t) => t.step_total === 200 && t.current_node === 'ns-train'));
    assert.match(train.find((t) => t.step_current === 100)!.message!, /^step 100\/200 \(50\.00%\), ETA /);
    assert.ok(ticks.some((t) => t.stage === 'process_data' && /Done matching COLMAP features/.test(t.message!)));

    assert.equal(res.outputs[0]!.name, 'splat.ply');
    const ply = await readFile(res.outputs[0]!.localPath);
    assert.equal(res.outputs[0]!.size, ply.length);
    assert.match(ply.subarray(0, 40).toString('latin1'), /^ply\nformat binary_little_endian 1\.0/);
    assert.ok(logs.some((l) => l.includes('--viewer.quit-on-train-completion True') && l.includes('--max-num-iterations 200')));
    assert.ok(logs.some((l) => /--load-config \S+\/outputs\/processed\/splatfacto\/\d{4}-\d\d-\d\d_\d{6}\/config\.yml/.test(l)));
  });

  test('a single video is processed in video mode; nerfacto exports a point cloud', async () => {
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '0' } });
    const { ctx, logs } = await makeCtx({ method: 'nerfacto', max_num_iterations: 30, export_format: 'pointcloud' }, [
      { name: 'walkaround.mp4', bytes: Buffer.from('not really a video') },
    ]);
    const res = await exec.run(ctx);
    assert.ok(logs.some((l) => l.startsWith('nerfstudio: ns-process-data video --data ')));
    assert.equal(res.outputs[0]!.name, 'point_cloud.ply');
  });

  test('a failing stage surfaces the tail of stderr', async () => {
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '0', NS_FAKE_FAIL: 'train' } });
    const { ctx, ticks } = await makeCtx({ train: { max_num_iterations: 100 } }, [{ name: 'a.png' }]);
    const err = await rejection(exec.run(ctx));
    assert.equal(err.code, 'tool_error');
    assert.match(err.message, /^ns-train exited with code 1:/);
    assert.match(err.message, /torch\.OutOfMemoryError: CUDA out of memory/);
    assert.match(err.message, /Traceback \(most recent call last\)/);
    assert.equal(err.details?.stage, 'train');
    assert.ok(!ticks.some((t) => t.stage === 'export'));

    const exec2 = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '0', NS_FAKE_FAIL: 'process_data' } });
    const { ctx: ctx2 } = await makeCtx({}, [{ name: 'a.png' }]);
    const err2 = await rejection(exec2.run(ctx2));
    assert.match(err2.message, /^ns-process-data exited with code 1:[\s\S]*COLMAP only found poses for 0 images/);
  });

  test('cancel kills the whole process group (SIGTERM)', async () => {
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '5' }, killGraceMs: 5000 });
    const ac = new AbortController();
    const { ctx, workDir, waitForTick } = await makeCtx({ train: { max_num_iterations: 1000000 } }, [{ name: 'a.png' }], ac.signal);
    const running = waitForTick((t) => t.stage === 'train' && t.step_current >= 10);
    const run = exec.run(ctx);
    await running;
    const workerPid = Number(await readFile(path.join(workDir, 'outputs', '.ns-fake-worker.pid'), 'utf8'));
    assert.ok(alive(workerPid), 'the fake dataloader worker runs while training');
    const t0 = Date.now();
    ac.abort();
    const err = await rejection(run);
    assert.equal(err.code, 'cancelled');
    assert.ok(Date.now() - t0 < 4000, 'SIGTERM was enough, no grace wait');
    assert.ok(await waitDead(workerPid), 'worker in the same process group is gone');
  });

  test('cancel escalates to SIGKILL when the trainer ignores SIGTERM', async () => {
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '5', NS_FAKE_IGNORE_SIGTERM: '1' }, killGraceMs: 200 });
    const ac = new AbortController();
    const { ctx, workDir, waitForTick } = await makeCtx({ train: { max_num_iterations: 1000000 } }, [{ name: 'a.png' }], ac.signal);
    const running = waitForTick((t) => t.stage === 'train' && t.step_current >= 10);
    const run = exec.run(ctx);
    await running;
    const workerPid = Number(await readFile(path.join(workDir, 'outputs', '.ns-fake-worker.pid'), 'utf8'));
    ac.abort();
    const err = await rejection(run);
    assert.equal(err.code, 'cancelled');
    assert.ok(await waitDead(workerPid));
  });

  test('a zip of images is extracted and processed', { skip: spawnSync('python3', ['--version']).status !== 0 && spawnSync('unzip', ['-v']).status !== 0 }, async (t) => {
    const src = path.join(tmpRoot, 'zipsrc', 'capture');
    await mkdir(src, { recursive: true });
    for (const n of ['1.png', '2.png']) await writeFile(path.join(src, n), renderSeededPng(n, { width: 8, height: 8 }));
    const zip = path.join(tmpRoot, 'capture.zip');
    const made = spawnSync('python3', ['-m', 'zipfile', '-c', zip, 'capture'], { cwd: path.dirname(src) });
    if (made.status !== 0) {
      t.skip('python3 zipfile unavailable to build the fixture');
      return;
    }
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '0' } });
    const { ctx, logs } = await makeCtx({ max_num_iterations: 20 }, [{ name: 'capture.zip', bytes: await readFile(zip) }]);
    const res = await exec.run(ctx);
    assert.equal(res.outputs[0]!.name, 'splat.ply');
    assert.ok(logs.some((l) => /ns-process-data images --data \S+\/input\/capture /.test(l)));
  });

  test('missing binaries and bad specs fail cleanly', async () => {
    const exec = new NerfstudioExecutor({ binDir: path.join(tmpRoot, 'nope') });
    const { ctx } = await makeCtx({}, [{ name: 'a.png' }]);
    const err = await rejection(exec.run(ctx));
    assert.equal(err.code, 'tool_error');
    assert.match(err.message, /cannot start ns-process-data: .*not found in/);

    const ok = new NerfstudioExecutor({ binDir });
    const { ctx: noInputs } = await makeCtx({}, []);
    assert.equal((await rejection(ok.run(noInputs))).code, 'bad_input');
    const { ctx: badFmt } = await makeCtx({ export: { format: 'obj' } }, [{ name: 'a.png' }]);
    assert.equal((await rejection(ok.run(badFmt))).code, 'bad_input');
  });
});

describe('nerfstudio helpers', () => {
  test('TrainOutputParser reads LocalWriter rows through cursor escapes', () => {
    const p = new TrainOutputParser();
    assert.equal(p.line('Step (% Done)       Train Iter (time)    ETA (time)           Train Rays / Sec     '), undefined);
    const row = p.line('\r\x1b[4A\x1b[1K\r1230 (12.30%)       45.123 ms            3 m, 12 s            412.34 K              \x1b[0m');
    assert.deepEqual(row, {
      step: 1230,
      percent: 12.3,
      columns: { 'Train Iter (time)': '45.123 ms', 'ETA (time)': '3 m, 12 s', 'Train Rays / Sec': '412.34 K' },
    });
    assert.equal(p.line('-----------------------------------------'), undefined);
    assert.equal(p.line('[12:00:01] Saving config to: outputs/x/config.yml'), undefined);
  });

  test('parseNerfstudioSpec accepts flat and nested shapes', () => {
    const a = parseNerfstudioSpec({ method: 'nerfacto', max_num_iterations: 500, train: { args: { 'pipeline.model.background-color': 'white' } } }, {});
    assert.equal(a.method, 'nerfacto');
    assert.equal(a.maxIterations, 500);
    assert.equal(a.exportFormat, 'pointcloud');
    assert.deepEqual(a.trainArgs, ['--pipeline.model.background-color', 'white']);
    const b = parseNerfstudioSpec({ train: { method: 'splatfacto-big' }, export: { format: 'poisson', args: ['--num-points', '1000'] } }, { max_num_iterations: '7000' });
    assert.equal(b.method, 'splatfacto-big');
    assert.equal(b.maxIterations, 7000);
    assert.equal(b.exportFormat, 'poisson');
    assert.deepEqual(b.exportArgs, ['--num-points', '1000']);
    assert.throws(() => parseNerfstudioSpec({ method: '--help' }, {}), (e: unknown) => e instanceof ExecutorError && e.code === 'bad_input');
  });
});
