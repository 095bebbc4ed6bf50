// Traces: one run is one connected trace, from the HTTP request that got the 202 to the agent's
// result. The node and the real agent program (in-process: startAgent over the real gRPC stream on
// loopback) share one tracer provider whose exporter is an InMemorySpanExporter. The run request
// carries a W3C traceparent, so the whole run must land in that caller's trace.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { rmSync } from 'node:fs';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { startTracing, type TracingHandle } from '../../src/shared/tracing-sdk.js';
import { createLogger } from '../../src/shared/logger.js';
import { parseAgentArgs, startAgent, type RunningAgent } from '../../src/agent/main.js';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { submitTask, waitForStatus } from '../helpers/tasks.js';
import { setupTeam, createWorkflow, tinyGraph, waitFor, waitTask, agentsOf, tmpDir, type TeamSetup } from '../agents/helpers.js';

const exporter = new InMemorySpanExporter();
let tracing: TracingHandle;
let t: TestNode;
let s: TeamSetup;
let agent: RunningAgent;
const stateDir = tmpDir('gantry-trace-agent-');
const logLines: Array<Record<string, any>> = [];
let sink: Writable;

before(async () => {
  tracing = startTracing({ serviceName: 'gantry-test', exporter });
  sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) logLines.push(JSON.parse(line) as Record<string, any>);
      cb();
    },
  });
  t = await startTestNode({}, 'tracing', { logger: createLogger('info', sink) });
  s = await setupTeam(t);
  const cfg = parseAgentArgs(
    ['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--simulate-duration-ms', '150', '--simulate-steps', '3', '--state-dir', stateDir, '--container-runtime', 'none', '--sync-interval-s', '0', '--labels', 'trace-gpu'],
    {},
  );
  assert.ok(cfg);
  agent = await startAgent(cfg, { logger: createLogger('info', sink).child({ side: 'agent' }), noGpuProbe: true, rescanMs: 0 });
  await waitFor('agent online', async () => (await agentsOf(t, s)).some((a) => a.agent_status === 'online'));
});

after(async () => {
  await agent?.stop();
  await t?.stop();
  await tracing?.shutdown();
  rmSync(stateDir, { recursive: true, force: true });
});

const hex = (n: number): string => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');
const parentOf = (sp: ReadableSpan): string | undefined => sp.parentSpanContext?.spanId;

test('one run is one connected trace: edge -> submit -> scheduler -> task actor -> agent -> completion, with SQL spans and trace ids in logs', async () => {
  const wf = await createWorkflow(t, s, tinyGraph(), { required_labels: ['trace-gpu'] });
  const traceId = hex(32);
  const callerSpan = hex(16);
  const r = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'a traced fox' } }, { token: s.sk.value, headers: { traceparent: `00-${traceId}-${callerSpan}-01` } });
  assert.equal(r.status, 202, r.text);
  const taskId = r.body.task_id as string;
  await waitTask(t, s, taskId, (x) => x.task_status === 'completed', 'completed');
  // the completion span ends right after its transition committed, the agent's once its scratch
  // directory is removed (the GET above may see the row first)
  const spans = await waitFor('the completion and agent spans', () => {
    const all = exporter.getFinishedSpans();
    const ended = (name: string): boolean => all.some((x) => x.name === name && x.attributes['gantry.task.id'] === taskId);
    return ended('task finish') && ended('agent run task') ? all : null;
  });
  const trace = spans.filter((x) => x.spanContext().traceId === traceId);
  const byId = new Map(trace.map((x) => [x.spanContext().spanId, x]));
  const one = (name: string, pred: (x: ReadableSpan) => boolean = () => true): ReadableSpan => {
    const found = trace.filter((x) => x.name === name && pred(x));
    assert.equal(found.length, 1, `exactly one ${name} span in the trace (got ${found.length}; spans: ${trace.map((x) => x.name).join(', ')})`);
    return found[0] as ReadableSpan;
  };
  const forTask = (x: ReadableSpan): boolean => x.attributes['gantry.task.id'] === taskId;

  // the chain, each hop the child of the previous one
  const http = one('POST /r/workflows/{workflowId}/run');
  assert.equal(parentOf(http), callerSpan, 'the edge span continues the caller\'s traceparent');
  assert.equal(http.attributes['http.response.status_code'], 202);
  const submit = one('task submit', forTask);
  assert.equal(parentOf(submit), http.spanContext().spanId, 'submit inside the request');
  const sched = one('scheduler assign', forTask);
  assert.equal(parentOf(sched), submit.spanContext().spanId, 'the scheduler\'s decision joins the trace stored with the task row (after the 202)');
  const assign = one('task assign', forTask);
  assert.equal(parentOf(assign), sched.spanContext().spanId, 'the assigning transition is the scheduler\'s child');
  assert.equal(assign.attributes['gantry.task.to'], 'queued');
  const run = one('agent run task', forTask);
  assert.equal(parentOf(run), assign.spanContext().spanId, 'the agent\'s run: traceparent carried by Assign over the gRPC stream');
  const exec = one('agent execute');
  assert.equal(parentOf(exec), run.spanContext().spanId);
  const finish = one('task finish', forTask);
  assert.equal(parentOf(finish), run.spanContext().spanId, 'the completion: traceparent carried back by TaskResult');
  assert.equal(finish.attributes['gantry.task.to'], 'completed');
  const ack = one('task ack', forTask);
  assert.equal(parentOf(ack), submit.spanContext().spanId);
  // time order of the hops
  const t0 = (x: ReadableSpan): number => x.startTime[0] * 1e9 + x.startTime[1];
  assert.ok(t0(submit) <= t0(sched) && t0(sched) <= t0(assign) && t0(assign) <= t0(run) && t0(run) <= t0(finish));

  // PostgreSQL statements of the request are spans under it (statement shape only, no values)
  const sql = trace.filter((x) => x.name.startsWith('pg '));
  assert.ok(sql.length > 0, 'SQL spans in the trace');
  for (const q of sql) {
    assert.equal(q.attributes['db.system.name'], 'postgresql');
    assert.doesNotMatch(String(q.attributes['db.query.text']), /traced fox/, 'no parameter value in a span');
  }
  assert.ok(sql.some((q) => { let p = parentOf(q); while (p && p !== http.spanContext().spanId) p = byId.get(p) ? parentOf(byId.get(p) as ReadableSpan) : undefined; return p === http.spanContext().spanId; }), 'a SQL span descends from the request span');

  // connected: every span's parent is in the trace, except the caller's span the request named
  for (const x of trace) {
    const p = parentOf(x);
    assert.ok(p === callerSpan || byId.has(p ?? ''), `${x.name}: its parent ${p} is a span of this trace`);
  }
  // nothing of this task leaked into another trace
  for (const x of spans) if (x.attributes['gantry.task.id'] === taskId) assert.equal(x.spanContext().traceId, traceId, `${x.name} is in the run's trace`);

  // trace ids in logs: the committed transitions of the task carry the trace id
  const transitions = logLines.filter((l) => l.msg === 'task transition' && l.task_id === taskId);
  assert.ok(transitions.length >= 3, 'queued, running, completed');
  for (const l of transitions) assert.equal(l.trace_id, traceId, `transition to ${l.to} logged with the trace id`);
  const access = logLines.find((l) => l.msg === 'request' && l.method === 'POST' && String(l.path).endsWith('/run') && l.status === 202);
  assert.equal(access?.trace_id, traceId, 'the access line carries the trace id');
  assert.equal(access?.span_id, http.spanContext().spanId);
  // and the agent's lines about the run (logged inside its span)
  for (const msg of ['task accepted', 'task completed']) {
    const l = logLines.find((x) => x.side === 'agent' && x.msg === msg && x.task_id === taskId);
    assert.ok(l, `agent: ${msg}`);
    assert.equal(l.trace_id, traceId, `agent: ${msg} carries the trace id`);
    assert.equal(l.span_id, run.spanContext().spanId, `agent: ${msg} carries the run span's id`);
  }
});

test('a task without a stored trace: no scheduler/assign/ack spans; the agent\'s run starts a trace, which the completion joins', async () => {
  const id = await submitTask(t.node, s.user.teamId, { requiredLabels: ['trace-gpu'] });
  await waitForStatus(t.node, id, 'completed', 20_000);
  const mine = await waitFor('the agent and completion spans', () => {
    const xs = exporter.getFinishedSpans().filter((x) => x.attributes['gantry.task.id'] === id);
    return xs.some((x) => x.name === 'agent run task') && xs.some((x) => x.name === 'task finish') ? xs : null;
  });
  assert.deepEqual(mine.map((x) => x.name).sort(), ['agent run task', 'task finish'], 'no scheduler, assign or ack spans without a trace to join');
  const run = mine.find((x) => x.name === 'agent run task') as ReadableSpan;
  const fin = mine.find((x) => x.name === 'task finish') as ReadableSpan;
  assert.equal(run.parentSpanContext, undefined, 'the agent starts its own trace when the assignment carries none');
  assert.equal(fin.parentSpanContext?.spanId, run.spanContext().spanId, 'the completion still joins the agent\'s trace');
});

test('tracing off: no span is made, no traceparent stored, the run still completes', async () => {
  await tracing.shutdown();
  const before = exporter.getFinishedSpans().length;
  const wf = await createWorkflow(t, s, tinyGraph(), { required_labels: ['trace-gpu'] });
  const r = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'untraced' } }, { token: s.sk.value, headers: { traceparent: `00-${hex(32)}-${hex(16)}-01` } });
  assert.equal(r.status, 202);
  await waitTask(t, s, r.body.task_id as string, (x) => x.task_status === 'completed', 'completed');
  assert.equal(exporter.getFinishedSpans().length, before, 'no span exported');
  const rows = await t.node.db.execute<{ trace_parent: string | null }>('select trace_parent from tasks where id = ?', [r.body.task_id]);
  assert.equal(rows[0]?.trace_parent, null);
  assert.ok(!logLines.some((l) => l.task_id === r.body.task_id && l.trace_id), 'no trace id in its log lines');
});
