/**
 * @gantry/sdk as a user gets it: `npm pack` in packages/sdk (prepack builds dist/ with tsc) makes a
 * tarball of the build only (ESM + declarations, no TypeScript sources); `npm install <tarball>` in
 * an empty project, offline (the runtime dependencies are packed from this repository's
 * node_modules, so no registry is asked); there, plain Node (no tsx) imports it and runs runAndWait
 * against a real node and a simulate agent, and tsc type-checks a consumer against the shipped
 * declarations; bundled from that project for the browser (esbuild), runAndWait runs in Debian's
 * chromium too (skipped, naming chromium, where it is missing).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { tmpDir } from '../agents/helpers.js';
import { startLiveTeam, type LiveTeam } from './live-team.js';
import { browserSkip, launchBrowser } from '../helpers/browser.js';

const root = new URL('../..', import.meta.url).pathname;
const sdkDir = join(root, 'packages/sdk');
const require = createRequire(join(root, 'package.json'));

function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { cwd, env: { ...process.env, npm_config_update_notifier: 'false', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString()));
    p.stderr.on('data', (c: Buffer) => (out += c.toString()));
    p.on('close', (code) => resolve({ code, out }));
  });
}

/** The package directory of `name` as resolved from `fromDir` (node_modules lookup). */
function packageDir(name: string, fromDir: string): string {
  let dir = dirname(createRequire(join(fromDir, 'noop.js')).resolve(`${name}/package.json`));
  while (!readdirSync(dir).includes('package.json')) dir = dirname(dir);
  return dir;
}

/** The SDK's runtime dependencies and theirs, as installed in this repository. */
function runtimeClosure(): string[] {
  const seen = new Map<string, string>();
  const visit = (pkgDir: string): void => {
    const deps = (JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> }).dependencies ?? {};
    for (const name of Object.keys(deps)) {
      if (seen.has(name)) continue;
      const dir = packageDir(name, pkgDir);
      seen.set(name, dir);
      visit(dir);
    }
  };
  visit(sdkDir);
  return [...seen.values()];
}

const noBrowser = browserSkip('the browser run is skipped');

let live: LiveTeam;
/** The consumer project the tarball was installed into (set by the first test). */
let app: string | null = null;
before(async () => {
  live = await startLiveTeam('clients_sdk_package', 'packed-sdk');
});
after(async () => {
  await live?.stop();
});

test('@gantry/sdk packs its build, installs offline from the tarball, and runAndWait works from it', { timeout: 240_000 }, async () => {
  const out = tmpDir('gantry-sdk-pack-');
  const packed = await run('npm', ['pack', '--json', '--pack-destination', out], sdkDir);
  assert.equal(packed.code, 0, packed.out);
  const info = JSON.parse(packed.out.slice(packed.out.indexOf('[\n'))) as Array<{ filename: string; files: Array<{ path: string }> }>;
  const files = info[0]!.files.map((f) => f.path).sort();
  for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/schema.d.ts', 'package.json']) assert.ok(files.includes(f), `${f} in ${files.join(', ')}`);
  assert.ok(!files.some((f) => f.startsWith('src/') || f.endsWith('.ts') && !f.endsWith('.d.ts')), `no TypeScript sources: ${files.join(', ')}`);
  const manifest = JSON.parse(readFileSync(join(sdkDir, 'package.json'), 'utf8')) as { exports: Record<string, Record<string, string>>; types: string };
  assert.equal(manifest.exports['.']!.import, './dist/index.js');
  assert.equal(manifest.types, './dist/index.d.ts');

  // the runtime dependencies, packed from this repository's node_modules: no registry download
  const deps = runtimeClosure();
  assert.ok(deps.length >= 2, deps.join(', '));
  const depPack = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', out, ...deps], out);
  assert.equal(depPack.code, 0, depPack.out);
  const tarballs = readdirSync(out).filter((f) => f.endsWith('.tgz')).map((f) => join(out, f));
  assert.equal(tarballs.length, deps.length + 1, tarballs.join(', '));

  const dir = tmpDir('gantry-sdk-consumer-');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'sdk-consumer', private: true, type: 'module' }));
  const inst = await run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', ...tarballs], dir, { npm_config_registry: 'http://127.0.0.1:9/' });
  assert.equal(inst.code, 0, inst.out);
  const installed = JSON.parse(readFileSync(join(dir, 'node_modules/@gantry/sdk/package.json'), 'utf8')) as { name: string };
  assert.equal(installed.name, '@gantry/sdk');

  // plain Node, outside the repository: the ESM build and its dependencies
  writeFileSync(
    join(dir, 'main.mjs'),
    `import { createClient, GantryError } from '@gantry/sdk';
const gantry = createClient({ baseUrl: process.env.GANTRY_BASE_URL, token: process.env.GANTRY_API_KEY });
const seen = [];
const { task_id, task, result } = await gantry.runAndWait(process.env.GANTRY_WORKFLOW, { prompt: 'a packed fox' }, { onEvent: (e) => seen.push(e.type) });
let code = null;
try { await gantry.getTask('00000000-0000-4000-8000-000000000000'); } catch (e) { code = e instanceof GantryError ? e.error_code : String(e); }
const png = new Uint8Array(await (await gantry.download(result.download_url)).arrayBuffer());
console.log(JSON.stringify({ task_id, status: task.task_status, seen, code, png: Array.from(png.subarray(0, 4)) }));
`,
  );
  const r = await run(process.execPath, ['main.mjs'], dir, { GANTRY_BASE_URL: live.baseUrl, GANTRY_API_KEY: live.s.sk.value, GANTRY_WORKFLOW: live.slug, NODE_OPTIONS: '' });
  assert.equal(r.code, 0, r.out);
  const got = JSON.parse(r.out.trim().split('\n').at(-1)!) as { task_id: string; status: string; seen: string[]; code: string; png: number[] };
  assert.equal(got.status, 'completed');
  assert.equal(got.seen.at(-1), 'completed');
  assert.equal(got.code, 'task_not_found');
  assert.deepEqual(got.png, [0x89, 0x50, 0x4e, 0x47]);

  // the shipped declarations type-check a consumer (NodeNext, strict); a wrong use is an error
  writeFileSync(
    join(dir, 'check.ts'),
    `import { createClient, type Task, type TaskEvent } from '@gantry/sdk';
const gantry = createClient({ baseUrl: 'http://127.0.0.1:8080/api/v1', token: 'sk-x' });
export async function f(): Promise<string> {
  const { task }: { task: Task } = await gantry.runAndWait('wf', {}, { onEvent: (e: TaskEvent) => void e.id });
  // @ts-expect-error task_status is a string union, not a number
  const n: number = task.task_status;
  return task.task_status + String(n);
}
`,
  );
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, lib: ['ES2023', 'DOM'], types: [] }, files: ['check.ts'] }));
  const tsc = await run(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', dir], dir);
  assert.equal(tsc.code, 0, tsc.out);
  app = dir;
});

test('the installed tarball bundles for the browser (esbuild) and runAndWait runs in chromium', { skip: noBrowser, timeout: 180_000 }, async () => {
  assert.ok(app, 'the tarball was installed by the previous test');
  writeFileSync(
    join(app, 'browser.mjs'),
    `import { createClient } from '@gantry/sdk';
window.__run = async (baseUrl, token, slug) => {
  const gantry = createClient({ baseUrl, token });
  const seen = [];
  const { task, result } = await gantry.runAndWait(slug, { prompt: 'a browser fox' }, { onEvent: (e) => seen.push(e.type) });
  const png = new Uint8Array(await (await gantry.download(result.download_url)).arrayBuffer());
  return { status: task.task_status, seen, png: Array.from(png.subarray(0, 4)) };
};
`,
  );
  const { build } = await import('esbuild');
  const b = await build({ absWorkingDir: app, entryPoints: ['browser.mjs'], bundle: true, platform: 'browser', format: 'esm', write: false, logLevel: 'silent', metafile: true });
  const inputs = Object.keys(b.metafile.inputs);
  assert.ok(inputs.includes('node_modules/@gantry/sdk/dist/index.js'), `the tarball's build is bundled: ${inputs.join(', ')}`);
  assert.ok(!inputs.some((i) => i.startsWith('node:')), inputs.join(', '));
  const bundle = b.outputFiles[0]!.text.replace(/<\/script/gi, '<\\/script');

  const browser = await launchBrowser();
  try {
    const page = await browser.newPage();
    // a page of the node's origin (served by the browser's request interception): the API and the
    // local storage's download URLs are same-origin
    const pageUrl = `${live.origin}/__sdk-bundle-test.html`;
    await page.route(pageUrl, (route) => route.fulfill({ status: 200, contentType: 'text/html', body: `<!doctype html><html><body><script type="module">${bundle}</script></body></html>` }));
    await page.goto(pageUrl);
    await page.waitForFunction(() => typeof (window as unknown as { __run?: unknown }).__run === 'function');
    const got = await page.evaluate(
      ([baseUrl, token, slug]) => (window as unknown as { __run: (b: string, t: string, s: string) => Promise<{ status: string; seen: string[]; png: number[] }> }).__run(baseUrl!, token!, slug!),
      [live.baseUrl, live.s.sk.value, live.slug],
    );
    assert.equal(got.status, 'completed');
    assert.equal(got.seen.at(-1), 'completed');
    assert.deepEqual(got.png, [0x89, 0x50, 0x4e, 0x47]);
  } finally {
    await browser.close();
  }
});
