/**
 * README's Quick start sample outputs match the code: the number of migrations in the start-up log
 * line is the number of registered migrations (a new migration without a README update fails here),
 * and step 6's SSE sample shows the ids and events that steps 3-5 really stream.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { migrationsList } from '../../src/persistence/migrations/index.js';
import { startTestNode } from '../helpers/node.js';

const root = new URL('../..', import.meta.url).pathname;

test('the start-up sample names as many migrations as the node applies', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const n = /"migrations":\[\.\.\.(\d+) names\.\.\.\]/.exec(readme)?.[1];
  assert.equal(Number(n), migrationsList.length, 'README Quick start step 0: the migration count');
});

/** The "# id: N" / "# event: X" pairs of README's Quick start step 6 sample, in order. */
function sseSample(readme: string): Array<{ id: number; event: string }> {
  const from = readme.indexOf('**6. Follow a task live**');
  const block = readme.slice(from, readme.indexOf('```\n', readme.indexOf('```sh', from) + 5));
  const out: Array<{ id: number; event: string }> = [];
  const lines = block.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const id = /^# id: (\d+)$/.exec(lines[i] ?? '');
    const ev = /^# event: (\w+)$/.exec(lines[i + 1] ?? '');
    if (id && ev) out.push({ id: Number(id[1]), event: ev[1] as string });
  }
  return out;
}

test('Quick start step 6: the SSE sample shows the ids and events a run of step 5 streams', { timeout: 180_000 }, async () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const expected = sseSample(readme);
  assert.ok(expected.length >= 4, `sample events found: ${JSON.stringify(expected)}`);
  // step 3's workflow file and step 5's run body, verbatim from README
  const wfJson = /cat > \/tmp\/hello-wf\.json <<'EOF'\n([\s\S]*?)\nEOF\n/.exec(readme)?.[1];
  const runBody = /run -H "Authorization: Bearer \$SK" \\\n\s+-H 'Content-Type: application\/json' -d '(\{[^']*\})'/.exec(readme)?.[1];
  assert.ok(wfJson && runBody, 'README steps 3 and 5 found');
  const t = await startTestNode({}, 'readme_sse');
  const { registerUser, createCredential } = await import('../helpers/identity.js');
  const { spawnAgent, tmpDir, waitFor } = await import('../agents/helpers.js');
  const user = await registerUser(t.http);
  const ak = await createCredential(t.http, user, 'agent');
  const sk = await createCredential(t.http, user, 'integration');
  // step 4: the simulate agent with README's flags (its defaults)
  const agent = spawnAgent(['--executor', 'simulate', '--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', ak.value, '--state-dir', tmpDir('gantry-readme-sse-')]);
  try {
    const wf = await t.http.post('/workflows', JSON.parse(wfJson), { token: user.accessToken, team: user.teamId });
    assert.equal(wf.status, 200, wf.text);
    await waitFor('the agent online', async () => ((await t.http.get('/r/agents', { token: sk.value })).body.agent_list ?? []).some((a: { agent_status: string }) => a.agent_status === 'online'), 60_000);
    const run = await t.http.post('/r/workflows/slug/hello-txt2img/run', JSON.parse(runBody), { token: sk.value });
    assert.equal(run.status, 202, run.text);
    const task = run.body.task_id as string;
    await waitFor('the task completed', async () => (await t.http.get(`/r/tasks/${task}`, { token: sk.value })).body.task_status === 'completed', 120_000);
    const res = await fetch(`${t.origin}/api/v1/r/tasks/${task}/events`, { headers: { authorization: `Bearer ${sk.value}`, 'last-event-id': '0' } });
    assert.equal(res.status, 200);
    const text = await res.text(); // the stream closes after the terminal event
    const got = text
      .split('\n\n')
      .map((m) => ({ id: Number(/^id: (\d+)$/m.exec(m)?.[1]), event: /^event: (\w+)$/m.exec(m)?.[1] ?? '', data: /^data: (.*)$/m.exec(m)?.[1] ?? '' }))
      .filter((m) => m.event);
    for (const e of expected) {
      const g = got.find((x) => x.id === e.id);
      assert.equal(g?.event, e.event, `README shows id ${e.id} as ${e.event}; the stream had:\n${text}`);
    }
    assert.deepEqual(got.at(-1) && { id: got.at(-1)!.id, event: got.at(-1)!.event }, expected.at(-1), `the sample's last event is the stream's last:\n${text}`);
    const firstProgress = got.find((x) => x.event === 'progress');
    assert.match(firstProgress?.data ?? '', /"step_total":10/, 'the sample progress line: step_total 10 (simulate default)');
    for (const [id, status] of [[1, 'pending'], [2, 'queued'], [3, 'running']] as const) assert.match(got.find((x) => x.id === id)?.data ?? '', new RegExp(`"status":"${status}"`), `id ${id}: ${status}`);
  } finally {
    agent.kill('SIGTERM');
    await agent.exited;
    await t.stop();
  }
});
