import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import { NerfstudioExecutor, TrainOutputParser, parseNerfstudioSpec } from '../../src/agent/executors/nerfstudio.js';
import { extractTar, redactText } from '../../src/agent/executors/ns-files.js';
import { ExecutorError, type CheckpointStore, type ExecContext, type InputFile, type ProgressTick } from '../../src/agent/executors/types.js';
import { renderSeededPng } from '../../src/agent/png.js';

const binDir = fileURLToPath(new URL('../fixtures/ns-bin/', import.meta.url));
const tmpRoot = await mkdtemp(path.join(os.tmpdir(), 'gantry-ns-test-'));
after(() => rm(tmpRoot, { recursive: true, force: true }));
let seq = 0;

type Spec = Record<string, unknown>;
const spec = (over: Spec = {}): Spec => ({ method: 'splatfacto', data: { source: 'file_param' }, process_data: { input_type: 'images' }, train: { max_num_iterations: 200 }, export: {}, ...over });

async function makeCtx(workflow: unknown, inputs: { name: string; bytes?: Buffer }[], o: { signal?: AbortSignal; checkpoints?: CheckpointStore; workDir?: string } = {}) {
  const workDir = o.workDir ?? path.join(tmpRoot, `task-${++seq}`);
  const inDir = path.join(tmpRoot, `in-${++seq}`);
  await mkdir(path.resolve(workDir), { recursive: true });
  await mkdir(inDir, { recursive: true });
  const inputFiles: InputFile[] = [];
  for (const [i, f] of inputs.entries()) {
    const p = path.join(inDir, `${i}-${f.name}`);
    await writeFile(p, f.bytes ?? renderSeededPng(`img-${i}`, { width: 8, height: 8 }));
    inputFiles.push({ key: 'scan', fileKey: `fk_${i}`, fileName: f.name, localPath: p, targetPath: 'data.file_key' });
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
    signal: o.signal ?? new AbortController().signal,
    onProgress: (t) => {
      ticks.push(t);
      for (const l of listeners) l(t);
    },
    log: (m) => logs.push(m),
    ...(o.checkpoints ? { checkpoints: o.checkpoints } : {}),
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
  const cmd = (tool: string): string => logs.find((l) => l.startsWith(`nerfstudio: ${tool} `)) ?? '';
  return { ctx, ticks, logs, workDir: path.resolve(workDir), waitForTick, cmd };
}

const images = [{ name: 'a.png' }, { name: 'b.png' }, { name: 'c.png' }];

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
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return existsSync(`/proc/${pid}`);
  }
}

async function waitDead(pid: number, timeoutMs = 3000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
  return true;
}

const exec0 = (env: Record<string, string> = {}) => new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '0', ...env } });
const runDir = (workDir: string, methodName: string) => path.join(workDir, 'outputs', 'gantry', methodName, 'run');

describe('NerfstudioExecutor against the fake ns-* toolchain', () => {
  test('images -> splatfacto: exhaustive matching (no vocab tree download), tensorboard (no viewer port), deterministic run folder, splat.ply', async () => {
    const { ctx, ticks, workDir, cmd } = await makeCtx(spec(), images);
    const res = await exec0().run(ctx);
    const order = ticks.map((t) => t.stage).filter((s, i, a) => s !== a[i - 1]);
    assert.deepEqual(order, ['download', 'process_data', 'train', 'export']);
    for (let i = 1; i < ticks.length; i++) assert.ok(ticks[i]!.progress >= ticks[i - 1]!.progress, `progress monotonic at tick ${i}`);
    const steps = ticks.filter((t) => t.stage === 'train').map((t) => t.step_current);
    assert.deepEqual(steps.slice(1, -1), Array.from({ length: 20 }, (_, i) => i * 10));
    assert.equal(res.outputs[0]!.name, 'splat.ply');
    assert.match((await readFile(res.outputs[0]!.localPath)).subarray(0, 40).toString('latin1'), /^ply\nformat binary_little_endian 1\.0/);
    assert.match(cmd('ns-process-data'), /--matching-method exhaustive/);
    assert.match(cmd('ns-train'), /--vis tensorboard/);
    assert.match(cmd('ns-train'), /--experiment-name gantry --timestamp run/);
    assert.ok(!existsSync(path.join(workDir, 'outputs', '.ns-fake-viewer-port')), 'no viewer port was opened');
    assert.match(readFileSync(path.join(runDir(workDir, 'splatfacto'), 'config.yml'), 'utf8'), /^vis: tensorboard$/m);
  });

  test('nerfacto with default export settings gets its point cloud (--normal-method open3d); mesh is poisson with its textures, or tsdf', async () => {
    const video = [{ name: 'walk.mp4', bytes: Buffer.from('not really a video') }];
    const nerfacto = (exp: Spec): Spec => spec({ method: 'nerfacto', process_data: { input_type: 'video' }, train: { max_num_iterations: 30 }, export: exp });
    const a = await makeCtx(nerfacto({ format: 'pointcloud' }), video);
    const r1 = await exec0().run(a.ctx);
    assert.equal(r1.outputs[0]!.name, 'point_cloud.ply');
    assert.match(a.cmd('ns-export'), /^nerfstudio: ns-export pointcloud .*--normal-method open3d/);
    const b = await makeCtx(nerfacto({ format: 'mesh' }), video);
    const r2 = await exec0().run(b.ctx);
    assert.deepEqual(r2.outputs.map((o) => o.name), ['poisson_mesh.ply', 'material_0.mtl', 'material_0.png', 'mesh.obj']);
    const c = await makeCtx(nerfacto({ format: 'mesh', mesh_method: 'tsdf', target_num_faces: 1000 }), video);
    const r3 = await exec0().run(c.ctx);
    assert.equal(r3.outputs[0]!.name, 'tsdf_mesh.ply');
    assert.doesNotMatch(c.cmd('ns-export'), /--normal-method/, 'tsdf takes no --normal-method (tyro would exit 2)');
  });

  test('every typed field reaches its tool in its syntax: bare booleans for ns-process-data, True/False for ns-train and ns-export', async () => {
    const { ctx, workDir, cmd } = await makeCtx(
      spec({
        method: 'nerfacto',
        process_data: { input_type: 'images', matching_method: 'sequential', num_downscales: 1, camera_type: 'fisheye', skip_colmap: false, extra_args: { 'refine-intrinsics': false, gpu: false } },
        train: { max_num_iterations: 40, steps_per_save: 10, seed: 7, mixed_precision: false, extra_args: { 'pipeline.model.predict-normals': true } },
        export: { format: 'pointcloud', num_points: 64, remove_outliers: false, normal_method: 'model_output' },
      }),
      images,
    );
    const res = await exec0().run(ctx);
    assert.match(cmd('ns-process-data'), /--no-skip-colmap/);
    assert.match(cmd('ns-process-data'), /--no-refine-intrinsics --no-gpu/);
    const processed = JSON.parse(readFileSync(path.join(workDir, 'processed', 'transforms.json'), 'utf8')).fake_process;
    assert.deepEqual(processed, { mode: 'images', refine_intrinsics: false, gpu: false, matching_method: 'sequential', num_downscales: 1, num_frames_target: null, camera_type: 'fisheye' });
    assert.ok(existsSync(path.join(workDir, 'processed', 'images_2')) && !existsSync(path.join(workDir, 'processed', 'images_4')));
    const yml = readFileSync(path.join(runDir(workDir, 'nerfacto'), 'config.yml'), 'utf8');
    for (const l of ['max_num_iterations: 40', 'steps_per_save: 10', 'seed: 7', 'mixed_precision: false', 'predict_normals: true']) assert.match(yml, new RegExp(`^${l}$`, 'm'));
    assert.match(cmd('ns-export'), /--normal-method model_output --num-points 64 --remove-outliers False/);
    assert.equal(res.outputs[0]!.name, 'point_cloud.ply');
  });

  test('vanilla-nerf and tensorf read ns-process-data output through nerfstudio-data; mipnerf trains without W&B', async () => {
    for (const method of ['vanilla-nerf', 'tensorf', 'mipnerf']) {
      const { ctx, cmd } = await makeCtx(spec({ method, train: { max_num_iterations: 20 }, export: { format: 'pointcloud' } }), images);
      const res = await exec0().run(ctx);
      assert.equal(res.outputs[0]!.name, 'point_cloud.ply', method);
      if (method !== 'mipnerf') assert.match(cmd('ns-train'), / nerfstudio-data$/, method);
    }
  });

  test('progress counts the iterations ns-train really runs (train.extra_args overrides the typed field)', async () => {
    const { ctx, ticks } = await makeCtx(spec({ train: { max_num_iterations: 200, extra_args: { 'max-num-iterations': 50 } } }), images);
    await exec0().run(ctx);
    const train = ticks.filter((t) => t.stage === 'train');
    assert.ok(train.every((t) => t.step_total === 50), JSON.stringify(train.map((t) => t.step_total)));
    assert.deepEqual(train.map((t) => t.step_current).slice(1, -1), [0, 10, 20, 30, 40]);
  });

  test('a relative work dir works', async () => {
    const rel = path.relative(process.cwd(), path.join(tmpRoot, `rel-${++seq}`));
    assert.ok(!path.isAbsolute(rel));
    const { ctx } = await makeCtx(spec({ train: { max_num_iterations: 20 } }), images, { workDir: rel });
    assert.equal((await exec0().run(ctx)).outputs[0]!.name, 'splat.ply');
  });

  test('a work dir with a space works (COLMAP runs through shell strings with unquoted paths)', async () => {
    const { ctx } = await makeCtx(spec({ train: { max_num_iterations: 20 } }), images, { workDir: path.join(tmpRoot, `with space ${++seq}`) });
    assert.equal((await exec0().run(ctx)).outputs[0]!.name, 'splat.ply');
  });

  test('no export section: the checkpoint (config.yml + the latest .ckpt, one archive) is the output', async () => {
    const { ctx } = await makeCtx(spec({ export: undefined, train: { max_num_iterations: 30 } }), images);
    const res = await exec0().run(ctx);
    assert.equal(res.outputs.length, 1);
    assert.equal(res.outputs[0]!.name, 'checkpoint.tar');
    const out = path.join(tmpRoot, `untar-${++seq}`);
    const names = await extractTar(res.outputs[0]!.localPath, out);
    assert.ok(names.includes('config.yml') && names.includes('nerfstudio_models/step-000000029.ckpt'), names.join(','));
    assert.equal(JSON.parse(readFileSync(path.join(out, 'nerfstudio_models/step-000000029.ckpt'), 'utf8')).step, 29);
  });

  test('data.source path and url: the capture comes from the agent disk or an http(s) URL', async () => {
    const dir = path.join(tmpRoot, `capture-${++seq}`);
    await mkdir(dir);
    for (const n of ['1.png', '2.jpg']) await writeFile(path.join(dir, n), renderSeededPng(n, { width: 8, height: 8 }));
    const p = await makeCtx(spec({ data: { source: 'path', path: dir }, train: { max_num_iterations: 20 } }), []);
    assert.equal((await exec0().run(p.ctx)).outputs[0]!.name, 'splat.ply');
    assert.match(p.cmd('ns-process-data'), new RegExp(`--data ${dir} `));

    const srv = http.createServer((req, res) => {
      if (req.url?.startsWith('/walk.mp4')) res.end(Buffer.from('fake video bytes'));
      else res.writeHead(404).end('nope');
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    after(() => srv.close());
    const base = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
    const u = await makeCtx(spec({ data: { source: 'url', url: `${base}/walk.mp4?X-Amz-Signature=topsecret123` }, process_data: { input_type: 'video' }, train: { max_num_iterations: 20 } }), []);
    assert.equal((await exec0().run(u.ctx)).outputs[0]!.name, 'splat.ply');
    assert.match(u.cmd('ns-process-data'), /^nerfstudio: ns-process-data video --data \S+walk\.mp4 /);
    const missing = await makeCtx(spec({ data: { source: 'url', url: `${base}/gone.zip?token=topsecret123` } }), []);
    const err = await rejection(exec0().run(missing.ctx));
    assert.equal(err.code, 'bad_input');
    assert.match(err.message, /HTTP 404/);
    assert.doesNotMatch(err.message, /topsecret123/);
  });

  test('polycam, record3d, metashape, realitycapture and odm captures run end to end', async () => {
    const png = renderSeededPng('x', { width: 8, height: 8 });
    const layouts: Record<string, Record<string, Buffer | string>> = {
      polycam: { 'keyframes/corrected_images/1.jpg': png, 'keyframes/corrected_images/2.jpg': png, 'keyframes/depth/1.png': png },
      record3d: { 'rgb/0.jpg': png, 'rgb/1.jpg': png, 'metadata.json': '{}' },
      metashape: { 'images/a.jpg': png, 'images/b.jpg': png, 'cameras.xml': '<document/>' },
      realitycapture: { 'images/a.jpg': png, 'cameras.csv': '#name,x,y\n' },
      odm: { 'images/a.jpg': png, 'odm_report/shots.geojson': '{}', 'cameras.json': '{}', 'opensfm/reconstruction.json': '[]' },
    };
    for (const [inputType, files] of Object.entries(layouts)) {
      const dir = path.join(tmpRoot, `${inputType}-${++seq}`);
      for (const [rel, body] of Object.entries(files)) {
        await mkdir(path.dirname(path.join(dir, rel)), { recursive: true });
        await writeFile(path.join(dir, rel), body);
      }
      const { ctx, cmd } = await makeCtx(spec({ data: { source: 'path', path: dir }, process_data: { input_type: inputType, num_downscales: 0 }, train: { max_num_iterations: 20 } }), []);
      const res = await exec0().run(ctx);
      assert.equal(res.outputs[0]!.name, 'splat.ply', inputType);
      if (inputType === 'metashape') assert.match(cmd('ns-process-data'), /--xml \S+cameras\.xml/);
      if (inputType === 'realitycapture') assert.match(cmd('ns-process-data'), /--csv \S+cameras\.csv/);
    }
    // a capture without its camera export is a clear input error, before any tool runs
    const bare = path.join(tmpRoot, `bare-${++seq}`);
    await mkdir(path.join(bare, 'images'), { recursive: true });
    const { ctx } = await makeCtx(spec({ data: { source: 'path', path: bare }, process_data: { input_type: 'metashape' } }), []);
    const err = await rejection(exec0().run(ctx));
    assert.equal(err.code, 'bad_input');
    assert.match(err.message, /needs exactly one \.xml camera export/);
  });

  test('ns-process-data exiting 0 without transforms.json is a failure carrying its own message', async () => {
    const { ctx, ticks } = await makeCtx(spec({ process_data: { input_type: 'images', skip_colmap: true } }), images);
    const err = await rejection(exec0().run(ctx));
    assert.equal(err.code, 'tool_error');
    assert.match(err.message, /^ns-process-data finished without writing transforms\.json:/);
    assert.match(err.message, /Could not find existing COLMAP results\. Not generating transforms\.json/);
    assert.ok(!ticks.some((t) => t.stage === 'train'), 'training never started');
    // a RuntimeError caught by process_data.py entrypoint (printed, exit 0)
    const caught = await makeCtx(spec(), images);
    const e2 = await rejection(exec0({ NS_FAKE_FAIL: 'process_data' }).run(caught.ctx));
    assert.match(e2.message, /^ns-process-data finished without writing transforms\.json:[\s\S]*Invalid combination of sfm_tool, feature_type, and matcher_type/);
    // with the capture's COLMAP model, --skip-colmap works (the bare flag)
    const dir = path.join(tmpRoot, `colmap-${++seq}`);
    await mkdir(path.join(dir, 'colmap', 'sparse', '0'), { recursive: true });
    for (const f of ['cameras.bin', 'images.bin', 'points3D.bin']) await writeFile(path.join(dir, 'colmap', 'sparse', '0', f), Buffer.alloc(8));
    for (const n of ['1.png', '2.png']) await writeFile(path.join(dir, n), renderSeededPng(n, { width: 8, height: 8 }));
    const ok = await makeCtx(spec({ data: { source: 'path', path: dir }, process_data: { input_type: 'images', skip_colmap: true }, train: { max_num_iterations: 20 } }), []);
    assert.equal((await exec0().run(ok.ctx)).outputs[0]!.name, 'splat.ply');
    assert.match(ok.cmd('ns-process-data'), / --skip-colmap( |$)/);
  });

  test('failures printed on stdout (COLMAP, export) reach the task error; stderr noise does not hide them', async () => {
    const { ctx } = await makeCtx(spec(), images);
    const err = await rejection(exec0({ NS_FAKE_FAIL: 'colmap' }).run(ctx));
    assert.match(err.message, /^ns-process-data exited with code 1:/);
    assert.match(err.message, /Error running command: colmap mapper/);
    assert.match(err.message, /No good initial image pair found/);
    const e2 = await makeCtx(spec({ method: 'nerfacto', train: { max_num_iterations: 20 }, export: { format: 'pointcloud', extra_args: { 'normal-method': 'model_output' } } }), images);
    const err2 = await rejection(exec0().run(e2.ctx));
    assert.match(err2.message, /^ns-export exited with code 1:/);
    assert.match(err2.message, /Normal output 'normals' not found in pipeline outputs/);
    assert.equal(err2.details?.stage, 'export');
    const e3 = await makeCtx(spec({ train: { max_num_iterations: 100 } }), images);
    const err3 = await rejection(exec0({ NS_FAKE_FAIL: 'train' }).run(e3.ctx));
    assert.match(err3.message, /^ns-train exited with code 1:[\s\S]*torch\.OutOfMemoryError: CUDA out of memory/);
  });

  test('a retry resumes from the latest uploaded checkpoint: --load-dir, progress from that step, fewer than 1.5x the steps in all', async () => {
    const stepsLog = path.join(tmpRoot, `steps-${++seq}.log`);
    const saved: { step: number; file: string }[] = [];
    const store = (resumeStep: number | null): CheckpointStore => ({
      resumeStep,
      async download(dest) {
        await copyFile(saved.at(-1)!.file, dest);
      },
      async upload(localPath, step) {
        const file = path.join(tmpRoot, `ckpt-${++seq}.tar`);
        await copyFile(localPath, file);
        saved.push({ step, file });
      },
    });
    const total = 600;
    const s = spec({ export: { format: 'gaussian-splat' }, train: { max_num_iterations: total, steps_per_save: 100 } });
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '2', NS_FAKE_STEPS_LOG: stepsLog }, checkpointPollMs: 20, killGraceMs: 200 });
    const ac = new AbortController();
    const first = await makeCtx(s, images, { signal: ac.signal, checkpoints: store(null) });
    const at60 = first.waitForTick((t) => t.stage === 'train' && t.step_current >= total * 0.6);
    const run1 = exec.run(first.ctx);
    await at60;
    ac.abort(); // the attempt dies at 60% (the agent case is test/agents/e2e-nerfstudio.test.ts)
    assert.equal((await rejection(run1)).code, 'cancelled');
    assert.ok(saved.length >= 1, 'checkpoints were uploaded while training');
    const latest = saved.at(-1)!.step;
    assert.ok(latest >= 200 && latest % 100 === 0, `latest uploaded step ${latest}`);
    const names = await extractTar(saved.at(-1)!.file, path.join(tmpRoot, `ck-${++seq}`));
    assert.ok(names.includes(`nerfstudio_models/step-${String(latest).padStart(9, '0')}.ckpt`) && names.includes('config.yml') && names.includes('processed/transforms.json'), names.join(','));

    const second = await makeCtx(s, images, { checkpoints: store(latest) });
    const res = await exec.run(second.ctx);
    assert.equal(res.outputs[0]!.name, 'splat.ply');
    assert.match(second.cmd('ns-train'), /--load-dir \S+\/resume\/nerfstudio_models/);
    const train = second.ticks.filter((t) => t.stage === 'train');
    assert.equal(train[0]!.step_current, latest + 1, 'progress continues from the checkpoint');
    assert.ok(train.slice(1, -1).every((t) => t.step_current > latest), JSON.stringify(train.slice(0, 3)));
    const rows = readFileSync(stepsLog, 'utf8').trim().split('\n').length;
    assert.ok(rows * 10 < total * 1.5, `steps run in all: about ${rows * 10} for ${total} configured`);
  });

  test('cancel kills the whole process group (SIGTERM)', async () => {
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '5' }, killGraceMs: 5000 });
    const ac = new AbortController();
    const { ctx, workDir, waitForTick } = await makeCtx(spec({ train: { max_num_iterations: 1000000 } }), images, { signal: ac.signal });
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
    const { ctx, workDir, waitForTick } = await makeCtx(spec({ train: { max_num_iterations: 1000000 } }), images, { signal: ac.signal });
    const running = waitForTick((t) => t.stage === 'train' && t.step_current >= 10);
    const run = exec.run(ctx);
    await running;
    const workerPid = Number(await readFile(path.join(workDir, 'outputs', '.ns-fake-worker.pid'), 'utf8'));
    ac.abort();
    assert.equal((await rejection(run)).code, 'cancelled');
    assert.ok(await waitDead(workerPid));
  });

  test('reapLeftovers kills the process groups a killed agent left running', async () => {
    const stateDir = path.join(tmpRoot, `state-${++seq}`);
    const exec = new NerfstudioExecutor({ binDir, env: { NS_FAKE_STEP_MS: '5' }, stateDir });
    const ac = new AbortController();
    const { ctx, workDir, waitForTick } = await makeCtx(spec({ train: { max_num_iterations: 1000000 } }), images, { signal: ac.signal });
    const running = waitForTick((t) => t.stage === 'train' && t.step_current >= 10);
    const run = exec.run(ctx).catch(() => undefined);
    await running;
    const workerPid = Number(await readFile(path.join(workDir, 'outputs', '.ns-fake-worker.pid'), 'utf8'));
    assert.equal((await readdir(path.join(stateDir, 'nerfstudio-running'))).length, 1, 'the running group is recorded');
    // a new executor on the same state dir (the restarted agent) stops it
    assert.equal(new NerfstudioExecutor({ binDir, stateDir }).reapLeftovers(), 1);
    assert.ok(await waitDead(workerPid), 'the group is gone');
    await run;
    ac.abort();
  });

  for (const mode of ['setpriv', 'none'] as const) {
    const noSetpriv = mode === 'setpriv' && !['/usr/bin/setpriv', '/bin/setpriv', '/usr/sbin/setpriv'].some((p) => existsSync(p));
    test(`the CLI and its whole process group die with the agent (${mode === 'setpriv' ? 'setpriv --pdeathsig and the watchdog' : 'the watchdog alone'})`, { skip: noSetpriv ? 'setpriv (util-linux) is not installed' : false }, async () => {
      const capture = path.join(tmpRoot, `death-${++seq}`);
      await mkdir(capture, { recursive: true });
      for (const n of ['1.png', '2.png']) await writeFile(path.join(capture, n), renderSeededPng(n, { width: 8, height: 8 }));
      const workDir = path.join(tmpRoot, `death-work-${seq}`);
      await mkdir(workDir);
      const pidFile = path.join(tmpRoot, `death-worker-${seq}.pid`);
      const harness = fileURLToPath(new URL('../fixtures/ns-death-harness.ts', import.meta.url));
      const agent = spawn(process.execPath, ['--import', 'tsx', harness, binDir, workDir, capture, mode], { env: { ...process.env, NS_FAKE_WORKER_PIDFILE: pidFile }, stdio: ['ignore', 'pipe', 'inherit'] });
      const exited = new Promise((r) => agent.on('exit', r));
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('the harness never reached training')), 20_000);
        agent.stdout.on('data', (c: Buffer) => {
          if (c.toString().includes('training')) {
            clearTimeout(t);
            resolve();
          }
        });
      });
      const workerPid = Number(readFileSync(pidFile, 'utf8'));
      const trainerPid = Number(readFileSync(`/proc/${workerPid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
      assert.ok(alive(trainerPid) && alive(workerPid));
      agent.kill('SIGKILL');
      await exited;
      assert.ok(await waitDead(trainerPid, 5000), 'ns-train died with its agent');
      assert.ok(await waitDead(workerPid, 5000), 'its dataloader worker too');
    });
  }

  test('a zip of images is extracted and processed', { skip: spawnSync('python3', ['--version']).status !== 0 ? 'python3 is needed to build the zip fixture' : false }, async () => {
    const src = path.join(tmpRoot, 'zipsrc', 'capture');
    await mkdir(src, { recursive: true });
    for (const n of ['1.png', '2.png']) await writeFile(path.join(src, n), renderSeededPng(n, { width: 8, height: 8 }));
    const zip = path.join(tmpRoot, 'capture.zip');
    assert.equal(spawnSync('python3', ['-m', 'zipfile', '-c', zip, 'capture'], { cwd: path.dirname(src) }).status, 0);
    const { ctx, cmd } = await makeCtx(spec({ train: { max_num_iterations: 20 } }), [{ name: 'capture.zip', bytes: await readFile(zip) }]);
    assert.equal((await exec0().run(ctx)).outputs[0]!.name, 'splat.ply');
    assert.match(cmd('ns-process-data'), /ns-process-data images --data \S+\/input\/capture /);
  });

  test('missing binaries and captures fail cleanly', async () => {
    const { ctx } = await makeCtx(spec(), images);
    const err = await rejection(new NerfstudioExecutor({ binDir: path.join(tmpRoot, 'nope') }).run(ctx));
    assert.equal(err.code, 'tool_error');
    assert.match(err.message, /cannot start ns-process-data: .*not found in/);
    const { ctx: noInputs } = await makeCtx(spec(), []);
    assert.equal((await rejection(exec0().run(noInputs))).code, 'bad_input');
    const { ctx: notDataset } = await makeCtx(spec({ process_data: undefined }), images);
    assert.match((await rejection(exec0().run(notDataset))).message, /not a processed nerfstudio dataset/);
  });
});

describe('the fake ns-* tools refuse what tyro refuses (exit 2, message on stderr)', () => {
  const run = (tool: string, args: string[]) => spawnSync(process.execPath, [path.join(binDir, tool), ...args], { encoding: 'utf8' });
  test('ns-process-data takes bare booleans; ns-train and ns-export take True/False; unknown flags and values exit 2', async () => {
    const dir = path.join(tmpRoot, `tyro-${++seq}`);
    await mkdir(dir, { recursive: true });
    const cases: Array<[string, string[], RegExp]> = [
      ['ns-process-data', ['images', '--data', dir, '--output-dir', dir, '--skip-colmap', 'True'], /Unrecognized options: True/],
      ['ns-process-data', ['images', '--data', dir, '--output-dir', dir, '--bogus', '1'], /Unrecognized options: --bogus 1/],
      ['ns-process-data', ['polycam', '--data', dir, '--output-dir', dir, '--matching-method', 'exhaustive'], /Unrecognized options: --matching-method/],
      ['ns-process-data', ['images', '--data', dir, '--output-dir', dir, '--num-frames-target', '5'], /Unrecognized options: --num-frames-target/],
      ['ns-process-data', ['metashape', '--data', dir, '--output-dir', dir], /required: --xml/],
      ['ns-process-data', ['images', '--data', dir, '--output-dir', dir, '--matching-method', 'fast'], /invalid choice: 'fast'/],
      ['ns-train', ['nerfacto', '--data', dir, '--mixed-precision'], /--mixed-precision: expected 1 argument/],
      ['ns-train', ['nerfacto', '--data', dir, '--mixed-precision', 'yes'], /invalid choice: 'yes' \(choose from 'True', 'False'\)/],
      ['ns-train', ['nerfacto', '--data', dir, '--seed', '1'], /Unrecognized options: --seed 1/],
      ['ns-export', ['tsdf', '--load-config', 'c.yml', '--output-dir', dir, '--normal-method', 'open3d'], /Unrecognized options: --normal-method open3d/],
      ['ns-export', ['pointcloud', '--load-config', 'c.yml', '--output-dir', dir, '--remove-outliers'], /--remove-outliers: expected 1 argument/],
    ];
    for (const [tool, args, msg] of cases) {
      const r = run(tool, args);
      assert.equal(r.status, 2, `${tool} ${args.join(' ')}: exit ${r.status} ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, msg, `${tool} ${args.join(' ')}`);
    }
  });
});

describe('nerfstudio helpers', () => {
  test('TrainOutputParser reads LocalWriter rows through cursor escapes', () => {
    const p = new TrainOutputParser();
    assert.equal(p.line('Step (% Done)       Train Iter (time)    ETA (time)           Train Rays / Sec     '), undefined);
    const row = p.line('\r\x1b[4A\x1b[1K\r1230 (12.30%)       45.123 ms            3 m, 12 s            412.34 K              \x1b[0m');
    assert.deepEqual(row, { step: 1230, percent: 12.3, columns: { 'Train Iter (time)': '45.123 ms', 'ETA (time)': '3 m, 12 s', 'Train Rays / Sec': '412.34 K' } });
    assert.equal(p.line('[12:00:01] Saving config to: outputs/x/config.yml'), undefined);
  });

  test('parseNerfstudioSpec: the method decides the defaults; extra_args replace typed flags', () => {
    const a = parseNerfstudioSpec(spec({ method: 'nerfacto-big', train: { seed: 3 }, export: {} }));
    assert.equal(a.iterations, 100000, 'nerfacto-big trains 100000 steps by default (method_configs.py)');
    assert.deepEqual(a.export, { command: 'pointcloud', flags: ['--normal-method', 'open3d'], primary: 'point_cloud.ply' });
    const b = parseNerfstudioSpec(spec({ train: { steps_per_save: 5, extra_args: { 'steps-per-save': 7, 'mixed-precision': true } } }));
    assert.deepEqual(b.trainFlags, ['--max-num-iterations', '30000', '--steps-per-save', '7', '--mixed-precision', 'True']);
    assert.equal(b.export?.command, 'gaussian-splat');
    assert.throws(() => parseNerfstudioSpec({ method: '--help' }), (e: unknown) => e instanceof ExecutorError && e.code === 'bad_input');
  });

  test('redactText removes signed URL queries, credentials and key=value secrets', () => {
    const s = redactText('GET https://user:pw@s3.example.com/b/k.zip?X-Amz-Signature=abc&X-Amz-Credential=def failed; api_key=xyz123 sk-abcdefgh12345 Bearer tok.en');
    assert.doesNotMatch(s, /pw@|abc|def|xyz123|abcdefgh12345|tok\.en/);
    assert.match(s, /https:\/\/s3\.example\.com\/b\/k\.zip\?\[redacted\]/);
  });
});
