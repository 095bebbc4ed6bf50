/**
 * Issue 12: the simulate executor's failure modes as agent flags (`--simulate-fail[=MESSAGE]`,
 * `--simulate-hang`, `--simulate-crash`, and their GANTRY_AGENT_SIMULATE_* variables), applying to
 * every task of the agent; a task's own simulate_* input still wins. Parsing and the executor in
 * process, then the real `gantry agent` program against a real node.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { AGENT_TRANSPORTS, agentServer, createWorkflow, runWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitTask, type AgentProcess, type TeamSetup } from './helpers.js';
import { agentUsage, parseAgentArgs, UsageError } from '../../src/agent/main.js';
import { SimulateExecutor } from '../../src/agent/executors/simulate.js';
import { ExecutorError, type ExecContext } from '../../src/agent/executors/types.js';

const base = ['--server', '127.0.0.1:1', '--credential', 'ak-x', '--executor', 'simulate'];
const terminal = (x: Record<string, any>): boolean => ['completed', 'failed', 'cancelled'].includes(x.task_status);

describe('flags', () => {
  test('parsing: bare --simulate-fail, --simulate-fail=MESSAGE, --simulate-hang, --simulate-crash, env, and only with --executor simulate', () => {
    const none = parseAgentArgs(base, {});
    assert.equal(none?.simulateFail, undefined);
    assert.equal(none?.simulateHang, false);
    assert.equal(none?.simulateCrash, false);
    assert.equal(parseAgentArgs([...base, '--simulate-fail'], {})?.simulateFail, '');
    assert.equal(parseAgentArgs([...base, '--simulate-fail=out of VRAM'], {})?.simulateFail, 'out of VRAM');
    // a bare --simulate-fail does not swallow the next flag
    const both = parseAgentArgs([...base, '--simulate-fail', '--simulate-hang'], {});
    assert.equal(both?.simulateFail, '');
    assert.equal(both?.simulateHang, true);
    assert.equal(parseAgentArgs([...base, '--simulate-crash'], {})?.simulateCrash, true);
    const env = parseAgentArgs(base, { GANTRY_AGENT_SIMULATE_FAIL: 'boom', GANTRY_AGENT_SIMULATE_HANG: '1', GANTRY_AGENT_SIMULATE_CRASH: 'true' });
    assert.deepEqual([env?.simulateFail, env?.simulateHang, env?.simulateCrash], ['boom', true, true]);
    assert.equal(parseAgentArgs(base, { GANTRY_AGENT_SIMULATE_FAIL: '1' })?.simulateFail, '');
    assert.equal(parseAgentArgs(base, { GANTRY_AGENT_SIMULATE_FAIL: 'false' })?.simulateFail, undefined);
    assert.throws(() => parseAgentArgs(['--server', '127.0.0.1:1', '--credential', 'ak-x', '--executor', 'comfyui', '--simulate-crash'], {}), UsageError);
    const help = agentUsage();
    for (const f of ['--simulate-fail', '--simulate-hang', '--simulate-crash', 'GANTRY_AGENT_SIMULATE_FAIL', 'GANTRY_AGENT_SIMULATE_HANG', 'GANTRY_AGENT_SIMULATE_CRASH']) assert.ok(help.includes(f), f);
  });

  test('the executor: agent-wide failure unless the task input says otherwise', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'gantry-simflags-'));
    try {
      const ctx = (parameters: Record<string, unknown>): ExecContext => ({
        taskId: 't',
        attempt: 1,
        toolType: 'comfyui',
        workflow: {},
        parameters,
        inputFiles: [],
        workDir: dir,
        signal: new AbortController().signal,
        onProgress: () => undefined,
        log: () => undefined,
      });
      const failing = new SimulateExecutor({ durationMs: 0, steps: 2, failMessage: 'agent-wide' });
      await assert.rejects(failing.run(ctx({})), (e: unknown) => e instanceof ExecutorError && e.code === 'tool_error' && e.message === 'agent-wide');
      await assert.rejects(failing.run(ctx({ simulate_fail: 'per task' })), /per task/);
      assert.equal((await failing.run(ctx({ simulate_fail: false }))).outputs.length, 1, 'simulate_fail: false in the task wins');
      await assert.rejects(new SimulateExecutor({ durationMs: 0, steps: 2, failMessage: '' }).run(ctx({})), /^ExecutorError: simulated failure$|simulated failure/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

for (const transport of AGENT_TRANSPORTS) {
  describe(`the agent program [${transport}]`, () => {
    let t: TestNode;
    const procs: AgentProcess[] = [];
    before(async () => {
      t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'agents_simflags');
    });
    after(async () => {
      for (const p of procs) p.kill('SIGKILL');
      await Promise.all(procs.map((p) => p.exited));
      await t.stop();
    });

    function agent(s: TeamSetup, extra: string[], env: Record<string, string> = {}): AgentProcess {
      const p = spawnAgent(['--server', agentServer(t.node, transport), '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-agent-state-'), '--simulate-duration-ms', '100', '--simulate-steps', '4', ...extra], env);
      procs.push(p);
      return p;
    }

    test('--simulate-fail=MESSAGE fails every task with that message; a task whose input sets simulate_fail: false completes', async () => {
      const s = await setupTeam(t);
      const a = agent(s, ['--simulate-fail=GPU fell off the bus (simulated)']);
      const wf = await createWorkflow(t, s, tinyGraph());
      for (const prompt of ['one', 'two']) {
        const id = await runWorkflow(t, s, wf, { prompt });
        const done = await waitTask(t, s, id, terminal, 'terminal', 30_000);
        assert.equal(done.task_status, 'failed', JSON.stringify(done));
        assert.match(String(done.error ?? done.error_message ?? JSON.stringify(done)), /GPU fell off the bus \(simulated\)/);
      }
      await a.waitLine((l) => l.msg === 'task failed' && l.code === 'tool_error', 'a tool_error failure');
      const wfOk = await createWorkflow(t, s, tinyGraph(4, { '10': { class_type: 'PrimitiveNode', inputs: { simulate_fail: false } } }));
      const ok = await waitTask(t, s, await runWorkflow(t, s, wfOk, { prompt: 'three' }), terminal, 'terminal', 30_000);
      assert.equal(ok.task_status, 'completed', JSON.stringify(ok));
    });

    test('GANTRY_AGENT_SIMULATE_HANG=1 (like --simulate-hang): the task runs until cancelled', async () => {
      const s = await setupTeam(t);
      const a = agent(s, [], { GANTRY_AGENT_SIMULATE_HANG: '1' });
      const wf = await createWorkflow(t, s, tinyGraph());
      const id = await runWorkflow(t, s, wf, { prompt: 'hang' });
      await a.waitLine((l) => l.msg === 'simulate: hanging until cancelled' && l.task_id === id, 'the hang', 30_000);
      assert.equal((await waitTask(t, s, id, (x) => x.task_status === 'running', 'running')).task_status, 'running');
      const c = await t.http.post(`/r/tasks/${id}/cancel`, {}, { token: s.sk.value });
      assert.equal(c.status, 200, c.text);
      assert.equal((await waitTask(t, s, id, terminal, 'terminal')).task_status, 'cancelled');
      await a.waitLine((l) => l.msg === 'task stopped after cancel' && l.task_id === id, 'the executor stopped');
    });

    test('--simulate-crash: the agent process dies by SIGKILL on its first task', async () => {
      const s = await setupTeam(t);
      const a = agent(s, ['--simulate-crash']);
      await a.waitLine((l) => l.msg === 'simulate failure mode on: it applies to every task this agent runs' && l.simulate_crash === true, 'the startup warning');
      const wf = await createWorkflow(t, s, tinyGraph());
      const id = await runWorkflow(t, s, wf, { prompt: 'crash' });
      assert.deepEqual(await a.exited, { code: null, signal: 'SIGKILL' });
      const task = await waitTask(t, s, id, (x) => x.task_status !== 'pending', 'assigned');
      assert.notEqual(task.task_status, 'completed');
    });
  });
}
