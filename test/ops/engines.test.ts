/**
 * `npm ci` prints no engine warning on the Node that README promises: every package that
 * package-lock.json installs admits the floor of package.json's `engines.node` (a Node 20: the
 * uWebSockets.js build in use is Node 20's), and README states that same floor.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

interface Semver {
  minVersion(range: string): { version: string; major: number } | null;
  satisfies(version: string, range: string): boolean;
}
const semver = createRequire(import.meta.url)('semver') as Semver;
const root = new URL('../../', import.meta.url);
const read = (p: string): string => readFileSync(new URL(p, root), 'utf8');

interface LockEntry { version?: string; engines?: Record<string, string> | string[] }
const pkg = JSON.parse(read('package.json')) as { engines: { node: string } };
const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, LockEntry> };
const floor = semver.minVersion(pkg.engines.node);

test('package.json promises a Node 20 floor, and README says the same', () => {
  assert.ok(floor, `engines.node ${pkg.engines.node} has no minimum`);
  assert.equal(floor.major, 20, 'the uWebSockets.js build is Node 20\'s');
  const readme = read('README.md');
  assert.ok(readme.includes(`Node >= ${floor.version}`), `README names Node >= ${floor.version}`);
  assert.ok(readme.includes(`engines: ">=${floor.version}"`), `README's stack notes name engines >=${floor.version}`);
});

test(`every installed package's engines.node admits the promised Node floor`, () => {
  assert.ok(floor);
  const excluding: string[] = [];
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path === '' || !entry.engines || Array.isArray(entry.engines)) continue;
    const range = entry.engines.node;
    if (range && !semver.satisfies(floor.version, range)) excluding.push(`${path}@${entry.version ?? '?'} (node ${range})`);
  }
  assert.deepEqual(excluding, [], `packages whose engines exclude Node ${floor.version} (npm ci warns for each)`);
});
