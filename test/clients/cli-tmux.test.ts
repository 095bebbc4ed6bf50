/**
 * `gantry run --follow` in a real terminal (tmux from Debian's packages): the progress bar renders
 * on the TTY and ends at 100%, then the output is saved. Skipped, naming tmux, when it is missing.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential, pairDevice, registerUser } from '../helpers/identity.js';
import { spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess } from '../agents/helpers.js';

const root = new URL('../..', import.meta.url).pathname;
const hasTmux = ((): boolean => {
  try {
    execFileSync('tmux', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

let t: TestNode | null = null;
let agent: AgentProcess | null = null;
let work = '';
const session = `gantry-cli-${process.pid}`;

before(async () => {
  if (!hasTmux) return;
  t = await startTestNode({}, 'clients_tmux');
  work = mkdtempSync(join(tmpdir(), 'gantry-tmux-'));
});
after(async () => {
  if (hasTmux) {
    try {
      execFileSync('tmux', ['kill-session', '-t', session], { stdio: 'ignore' });
    } catch {
      // already gone
    }
  }
  agent?.kill('SIGKILL');
  await agent?.exited;
  await t?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

const q = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;

test('run --follow in a terminal: the progress bar renders and ends at 100%', { timeout: 120_000, skip: hasTmux ? false : 'tmux is not installed (apt-get install tmux)' }, async () => {
  const node = t as TestNode;
  const user = await registerUser(node.http);
  const ak = await createCredential(node.http, user, 'agent');
  agent = spawnAgent(['--server', `127.0.0.1:${node.node.grpcPort}`, '--credential', ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-tmux-agent-'), '--simulate-duration-ms', '1500', '--simulate-steps', '6']);
  const dev = await pairDevice(node.http, user);
  const configDir = join(work, 'config');
  mkdirSync(configDir, { recursive: true });
  writeFileSync(join(configDir, 'credentials.json'), JSON.stringify({ server: node.origin, credential: dev.deviceCredential, team_id: dev.teamId }), { mode: 0o600 });
  const slug = `tmux-${Math.random().toString(36).slice(2, 8)}`;
  const wf = await node.http.post('/workflows', { workflow_slug: slug, display_name: 'tmux', workflow_json: tinyGraph(), parameters: [{ key: 'prompt', node_id: '6', field: 'text' }] }, { token: user.accessToken, team: user.teamId });
  assert.equal(wf.status, 200, wf.text);
  await waitFor('an online agent', async () => ((await node.http.get('/r/agents', { token: dev.deviceCredential })).body.agent_list as Array<{ agent_status: string }>).some((a) => a.agent_status !== 'offline'), 30_000, 200);

  const out = join(work, 'out');
  const cmd = `cd ${q(work)} && GANTRY_CONFIG_DIR=${q(configDir)} ${q(process.execPath)} ${q(join(root, 'bin/gantry.mjs'))} run ${slug} -p prompt=fox --follow -o ${q(out)}; echo "EXIT=$?"; sleep 60`;
  const env = { ...process.env, TERM: 'xterm-256color' } as Record<string, string>;
  delete env.NO_COLOR;
  delete env.TMUX;
  execFileSync('tmux', ['new-session', '-d', '-s', session, '-x', '160', '-y', '20', cmd], { env });
  const capture = (): string => execFileSync('tmux', ['capture-pane', '-p', '-t', session], { encoding: 'utf8' });
  // the bar is drawn while the task runs (a partial percentage), and ends at 100%
  const seen = new Set<string>();
  const pane = await waitFor(
    'the command to finish in tmux',
    () => {
      const p = capture();
      for (const m of p.matchAll(/ (\d{1,3})% \| /g)) seen.add(m[1]!);
      return /EXIT=\d+/.test(p) ? p : null;
    },
    90_000,
    100,
  );
  assert.match(pane, /EXIT=0/, pane);
  assert.match(pane, /[█░]{10,} 100% \| completed \| step 6\/6/, pane);
  assert.ok([...seen].some((p) => Number(p) > 0 && Number(p) < 100) || seen.has('100'), `percentages seen: ${[...seen].join(',')}`);
  assert.match(pane, /saved .*\.png/, pane);
  assert.ok(existsSync(out) && readdirSync(out).length === 1);
});
