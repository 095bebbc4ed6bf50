#!/usr/bin/env node
// Builds @gantry/sdk into dist/: ESM JavaScript and type declarations (tsc -p tsconfig.build.json),
// plus the generated schema types (src/schema.d.ts: tsc does not copy declaration files). Runs as
// the package's `build` and `prepack` scripts, and from scripts/build-console.mjs (the console
// imports the built package). `--if-stale` builds only when a source is newer than dist/index.js.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const dir = new URL('.', import.meta.url).pathname;
const src = join(dir, 'src');
const dist = join(dir, 'dist');
if (process.argv.includes('--if-stale') && existsSync(join(dist, 'index.js')) && existsSync(join(dist, 'schema.d.ts'))) {
  const built = statSync(join(dist, 'index.js')).mtimeMs;
  const inputs = [...readdirSync(src).map((f) => join(src, f)), join(dir, 'tsconfig.build.json')];
  if (inputs.every((f) => statSync(f).mtimeMs <= built)) process.exit(0);
}
const require = createRequire(join(dir, 'package.json'));
let tsc;
try {
  tsc = require.resolve('typescript/bin/tsc');
} catch {
  console.error('build-sdk: typescript is not installed (a dev dependency of the repository)');
  process.exit(1);
}
// built next to dist/ and swapped in at the end: a reader (a console build) never sees half a dist/
const tmp = join(dir, `dist.tmp-${process.pid}`);
rmSync(tmp, { recursive: true, force: true });
const r = spawnSync(process.execPath, [tsc, '-p', join(dir, 'tsconfig.build.json'), '--outDir', tmp], { stdio: 'inherit' });
if (r.status !== 0) {
  rmSync(tmp, { recursive: true, force: true });
  process.exit(r.status ?? 1);
}
copyFileSync(join(src, 'schema.d.ts'), join(tmp, 'schema.d.ts'));
rmSync(dist, { recursive: true, force: true });
renameSync(tmp, dist);
