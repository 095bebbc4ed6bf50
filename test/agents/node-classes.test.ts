/**
 * A class_type that no agent of the team lists is a warning on push (issue 34): a real
 * `gantry agent --executor comfyui` against the ComfyUI stand-in reports the classes of its
 * /object_info; POST and PUT /workflows answer `warnings` (the write still happens) for a graph with a
 * class no agent lists, none for one whose classes all are; a team with no reporting agent gets no
 * warning (nothing to compare with); `gantry workflows push` prints the warning on stderr.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';
import { agentServer, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess, type TeamSetup } from './helpers.js';

let t: TestNode;
let comfy: ComfyStandin;
let s: TeamSetup;
let agent: AgentProcess;
before(async () => {
  t = await startTestNode({}, 'agents_node_classes');
  comfy = await startComfyStandin({});
  s = await setupTeam(t);
  agent = spawnAgent(['--server', agentServer(t.node, 'grpc'), '--credential', s.ak.value, '--executor', 'comfyui', '--comfy-url', comfy.url, '--state-dir', tmpDir('gantry-agent-state-'), '--models-dir', tmpDir('gantry-models-')]);
  // the agent reads /object_info once ComfyUI answers and reports the classes (hello or inventory)
  await waitFor(
    'the agent to report its node classes',
    async () => {
      const c = new pg.Client({ connectionString: t.db.url });
      await c.connect();
      try {
        const r = await c.query<{ n: number }>('select jsonb_array_length(node_classes) as n from agents where team_id = $1', [s.user.teamId]);
        return (r.rows[0]?.n ?? 0) > 0;
      } finally {
        await c.end();
      }
    },
    30_000,
  );
});
after(async () => {
  agent?.kill('SIGTERM');
  await agent?.exited;
  await comfy?.close();
  await t?.stop();
});

const push = (body: Record<string, unknown>, team: TeamSetup = s) => t.http.post('/workflows', body, { token: team.user.accessToken, team: team.user.teamId });
const def = (graph: Record<string, unknown>) => ({ workflow_slug: `wf-${Math.random().toString(36).slice(2, 10)}`, display_name: 'classes', workflow_json: graph, parameters: [] });

test('a graph whose class_types the agents list gets no warning; an unknown class_type is a warning, the write still happens', async () => {
  const ok = await push(def(tinyGraph()));
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.body.warnings, undefined);

  const odd = await push(def(tinyGraph(4, { '10': { class_type: 'ImpactWildcardProcessor', inputs: { text: ['6', 0] } } })));
  assert.equal(odd.status, 200, odd.text);
  assert.equal(odd.body.warnings?.length, 1, odd.text);
  assert.equal(odd.body.warnings[0].warning_code, 'class_type_not_on_agents');
  assert.match(odd.body.warnings[0].warning_message, /ImpactWildcardProcessor/);
  assert.doesNotMatch(odd.body.warnings[0].warning_message, /KSampler/);
  const stored = await t.http.get(`/workflows/${odd.body.id}`, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(stored.status, 200);

  // an update that brings a new graph is checked too; one without workflow_json is not
  const upd = await t.http.put(`/workflows/${ok.body.id}`, { workflow_json: tinyGraph(4, { '11': { class_type: 'NotANode', inputs: {} } }) }, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(upd.status, 200, upd.text);
  assert.match(upd.body.warnings?.[0]?.warning_message ?? '', /NotANode/);
  const plain = await t.http.put(`/workflows/${ok.body.id}`, { display_name: 'renamed' }, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(plain.status, 200, plain.text);
  assert.equal(plain.body.warnings, undefined);
});

test('a team whose agents reported no classes gets no warning (nothing to compare with)', async () => {
  const other = await setupTeam(t);
  const r = await push(def(tinyGraph(4, { '10': { class_type: 'NotANode', inputs: {} } })), other);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.warnings, undefined);
});

test('gantry workflows push prints the warning on stderr', async () => {
  const dir = tmpDir('gantry-push-');
  const file = join(dir, 'wf.json');
  writeFileSync(file, JSON.stringify(def(tinyGraph(4, { '10': { class_type: 'NotANodeEither', inputs: {} } }))));
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_')) env[k] = v;
  Object.assign(env, { GANTRY_CONFIG_DIR: dir, GANTRY_SERVER: t.origin, GANTRY_TOKEN: s.user.accessToken, GANTRY_TEAM_ID: s.user.teamId, NO_COLOR: '1' });
  const child = spawn(process.execPath, [join(process.cwd(), 'bin/gantry.mjs'), 'workflows', 'push', file], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const code = await new Promise<number | null>((r) => child.on('close', r));
  assert.equal(code, 0, err);
  assert.match(out, /created wf-/);
  assert.match(err, /^warning: no agent of this team lists the node class_type\(s\) NotANodeEither .*\(class_type_not_on_agents\)$/m);
});
