/**
 * README's "First steps" run verbatim: the shell block between the first-steps markers is cut into
 * commands, run in one bash session (cwd: the repository, as README says) against a fresh node, and
 * the "# " sample lines under each command must appear, in order, in what it printed ("..." stands
 * for anything). Only the address differs: README's http://127.0.0.1:8080 is the test node's
 * origin (GANTRY_SERVER points there too). The test plays the user's other windows: it confirms the
 * pairing code `gantry login` prints as the registered user (the /pair page's call), and starts a
 * simulate agent with an ak- of that user's team (terminal 3 in README).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential, login } from '../helpers/identity.js';
import { spawnAgent, tmpDir, type AgentProcess } from '../agents/helpers.js';
import { firstSteps } from './readme.js';

const root = new URL('../..', import.meta.url).pathname;
const README_ORIGIN = 'http://127.0.0.1:8080';

const pattern = (sample: string): RegExp => new RegExp(`^${sample.trimEnd().split('...').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*?')}$`);

/** Every sample line matches an output line, in order. */
function matchSamples(expected: string[], output: string, what: string): void {
  const out = output.split('\n').map((l) => l.trimEnd());
  let at = 0;
  for (const e of expected) {
    const re = pattern(e);
    const found = out.findIndex((l, i) => i >= at && re.test(l));
    assert.ok(found >= 0, `${what}: README's sample line ${JSON.stringify(e)} is not in the output (from line ${at + 1}):\n${out.join('\n')}`);
    at = found + 1;
  }
}

let t: TestNode;
let agent: AgentProcess | null = null;
let configDir: string;
const hadOutputs = existsSync(join(root, 'gantry-outputs'));

before(async () => {
  t = await startTestNode({}, 'readme_first_steps');
  configDir = mkdtempSync(join(tmpdir(), 'gantry-first-steps-'));
});
after(async () => {
  agent?.kill('SIGKILL');
  await agent?.exited;
  await t.stop();
  rmSync(configDir, { recursive: true, force: true });
  if (!hadOutputs) rmSync(join(root, 'gantry-outputs'), { recursive: true, force: true });
});

test('README First steps: every command runs verbatim and prints what README shows', { timeout: 300_000 }, async () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const steps = firstSteps(readme);
  assert.ok(steps.length >= 8, `first steps found: ${steps.length}`);
  const register = /"email_address":"([^"]+)","password":"([^"]+)"/.exec(steps[0]!.command);
  assert.ok(register, 'the first step registers the account');
  const [, email, password] = register as unknown as [string, string, string];

  const local = (s: string): string => s.split(README_ORIGIN).join(t.origin);
  const script = ['exec 2>&1', ...steps.flatMap((s, i) => [`echo "@@step ${i}"`, local(s.command), `echo "@@rc ${i} $?"`])].join('\n');
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_')) env[k] = v;
  Object.assign(env, { GANTRY_CONFIG_DIR: configDir, GANTRY_SERVER: t.origin, NO_COLOR: '1' });
  const sh = spawn('bash', ['-c', script], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  let confirming: Promise<void> | null = null;
  sh.stdout.on('data', (d: Buffer) => {
    output += d.toString();
    const code = /\/pair\?code=([A-Za-z0-9-]+)/.exec(output)?.[1];
    if (code && !confirming) {
      // the user's browser: sign in, confirm on /pair; terminal 3: an agent of the team
      confirming = (async () => {
        const jwt = await login(t.http, email, password);
        const me = await t.http.get('/users/me', { token: jwt.accessToken });
        const teamId = me.body.team_list[0].id as string;
        const r = await t.http.post('/desktop/pair/confirm', { user_code: decodeURIComponent(code) }, { token: jwt.accessToken, team: teamId });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        const ak = await createCredential(t.http, { accessToken: jwt.accessToken, teamId }, 'agent');
        agent = spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-first-steps-agent-'), '--simulate-duration-ms', '300', '--simulate-steps', '3']);
      })();
    }
  });
  sh.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const guard = setTimeout(() => sh.kill('SIGKILL'), 240_000);
  const code = await new Promise<number | null>((resolve) => sh.on('exit', resolve));
  clearTimeout(guard);
  assert.ok(confirming, `gantry login printed no /pair link:\n${output}`);
  await confirming;
  assert.equal(code, 0, output);

  for (const [i, s] of steps.entries()) {
    const part = new RegExp(`@@step ${i}\\n([\\s\\S]*?)@@rc ${i} (\\d+)`).exec(output);
    assert.ok(part, `step ${i} (${s.command}) did not finish:\n${output}`);
    assert.equal(part[2], '0', `\`${s.command}\` exited ${part[2]}:\n${part[1]}`);
    matchSamples(s.expected.map(local), part[1] as string, `\`${s.command}\``);
  }
});
