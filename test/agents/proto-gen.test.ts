/** CI staleness check: src/gen must be exactly what proto-loader-gen-types makes of proto/agent/v1/agent.proto. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));

function files(dir: string, base = dir): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...files(p, base));
    else out.push(relative(base, p));
  }
  return out.sort();
}

test('src/gen is up to date with proto/agent/v1/agent.proto (run `npm run gen:proto`)', () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  const cmd = pkg.scripts['gen:proto'];
  assert.ok(cmd, 'package.json has a gen:proto script');
  const args = cmd.replace(/^rm -rf src\/gen && /, '').split(/\s+/).slice(1);
  const out = mkdtempSync(join(tmpdir(), 'gantry-gen-'));
  try {
    execFileSync(join(root, 'node_modules/.bin/proto-loader-gen-types'), args.map((a) => (a === '--outDir=src/gen' ? `--outDir=${out}` : a)), { cwd: root, stdio: 'pipe' });
    const want = files(out);
    const have = files(join(root, 'src/gen'));
    assert.deepEqual(have, want, 'the generated file set differs');
    for (const f of want) assert.equal(readFileSync(join(root, 'src/gen', f), 'utf8'), readFileSync(join(out, f), 'utf8'), `src/gen/${f} is stale`);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
