#!/usr/bin/env node
// Builds the web console (console/ -> console/dist) with Vite. Runs as the `prepare` lifecycle script,
// so `npm ci` / `npm install` on a fresh clone leaves a built console that `npm start` serves at `/`.
// Skips with a message where the console cannot be built: no console/ sources (the production image's
// dependency stage) or no vite (an install with --omit=dev). `--if-missing` builds only when
// console/dist/index.html does not exist yet.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const consoleDir = join(root, 'console');
if (!existsSync(join(consoleDir, 'index.html'))) {
  console.log('build-console: no console/ sources here; skipped');
  process.exit(0);
}
if (process.argv.includes('--if-missing') && existsSync(join(consoleDir, 'dist', 'index.html'))) process.exit(0);
const require = createRequire(join(root, 'package.json'));
let vite;
try {
  require.resolve('vite/package.json');
  vite = await import('vite');
} catch {
  console.log('build-console: vite is not installed (dev dependencies omitted); the console is not built and / answers 503');
  process.exit(0);
}
// the console imports @gantry/sdk, whose package exports point at its build (packages/sdk/dist)
const sdk = spawnSync(process.execPath, [join(root, 'packages/sdk/build.mjs'), '--if-stale'], { stdio: 'inherit' });
if (sdk.status !== 0) {
  console.error('build-console: the SDK build (packages/sdk/build.mjs) failed');
  process.exit(1);
}
const started = Date.now();
await vite.build({ root: consoleDir, configFile: join(consoleDir, 'vite.config.ts'), logLevel: 'warn' });
console.log(`build-console: console/dist built in ${Date.now() - started} ms`);
