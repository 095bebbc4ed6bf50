/**
 * P4's agents: one process hosting A instances of the real agent program (the code `gantry agent`
 * runs: flags parsed by parseAgentArgs, started by startAgent), each a stream to the node (gRPC for
 * HOST:PORT, the WebSocket on the HTTP port for ws://HOST:PORT) with
 * S slots and the simulate executor set to instant tasks (`--executor simulate
 * --simulate-duration-ms 0 --simulate-steps 0`: no progress ticks, one small PNG uploaded through
 * the presigned PUT, then the result).
 *
 *   node --import tsx bench/proc/agents.ts <server host:port | ws://host:port> <ak-credential> <agents> <slots>
 *
 * Prints {"ready": A} once every stream is connected, and {"stopped": true, "completed": n} after
 * SIGTERM (graceful drain).
 *
 * BENCH_ACK_RECORD=1 (P3): every agent's assignment arrival (the runner's onMessage) and ACK (the
 * `ack` transition handed to its stream client, which writes it at once while the window allows)
 * are stamped with performance.timeOrigin + performance.now() (epoch ms, the submitter's clock)
 * and printed every 100 ms as {"acks": [[task_id, assign_received, ack_sent], ...]}.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../src/shared/logger.js';
import { parseAgentArgs, startAgent, type RunningAgent } from '../../src/agent/main.js';
import { performance } from 'node:perf_hooks';

const [server, credential, nAgents = '16', nSlots = '8'] = process.argv.slice(2);
if (!server || !credential) {
  console.error('usage: agents.ts <host:port> <ak-credential> [agents] [slots]');
  process.exit(2);
}
const dir = mkdtempSync(join(os.tmpdir(), 'gantry-p4-agents-'));
const logger = createLogger('silent');
const agents: RunningAgent[] = [];
const RECORD = process.env.BENCH_ACK_RECORD === '1';
const epochNow = (): number => performance.timeOrigin + performance.now();
const received = new Map<string, number>();
let acks: Array<[string, number, number]> = [];

/** Stamps assignment arrival and ACK of one agent (P3); the agent's own code runs unchanged. */
function record(a: RunningAgent): void {
  const onMessage = a.runner.onMessage.bind(a.runner);
  a.runner.onMessage = (m) => {
    if (m.msg === 'assign' && m.assign && !received.has(m.assign.task_id)) received.set(m.assign.task_id, epochNow());
    onMessage(m);
  };
  const send = a.client.send.bind(a.client);
  a.client.send = (msg, kind, ref) => {
    if (msg.ack) {
      const id = msg.ack.task_id ?? '';
      acks.push([id, received.get(id) ?? NaN, epochNow()]);
      received.delete(id);
    }
    send(msg, kind, ref);
  };
}
if (RECORD)
  setInterval(() => {
    if (acks.length === 0) return;
    process.stdout.write(`${JSON.stringify({ acks })}\n`);
    acks = [];
  }, 100).unref();

let stopping = false;
const stop = async (): Promise<void> => {
  if (stopping) return;
  stopping = true;
  await Promise.all(agents.map((a) => a.stop().catch(() => undefined)));
  rmSync(dir, { recursive: true, force: true });
  process.stdout.write(`${JSON.stringify({ stopped: true, completed: agents.reduce((s, a) => s + a.runner.completed, 0) })}\n`);
  process.exit(0);
};
process.once('SIGTERM', () => void stop());
process.once('SIGINT', () => void stop());

for (let i = 0; i < Number(nAgents); i++) {
  const cfg = parseAgentArgs(
    [
      '--server', server,
      '--credential', credential,
      '--executor', 'simulate',
      '--simulate-duration-ms', '0',
      '--simulate-steps', '0',
      '--concurrency', nSlots,
      '--machine-id', `bench-p4-${i}`,
      '--name', `bench-p4-${i}`,
      '--state-dir', dir,
      '--work-dir', join(dir, `work-${i}`),
      '--gpu', 'NVIDIA RTX 4090:24',
      '--sync-interval-s', '0',
      '--drain-timeout-s', '10',
      '--log-level', 'silent',
    ],
    {},
  );
  if (!cfg) throw new Error('parseAgentArgs returned no config');
  const a = await startAgent(cfg, { logger, noGpuProbe: true, rescanMs: 0 });
  if (RECORD) record(a);
  agents.push(a);
}
const deadline = Date.now() + 60_000;
while (!agents.every((a) => a.client.connected)) {
  if (Date.now() > deadline) {
    console.error(`agents: only ${agents.filter((a) => a.client.connected).length}/${agents.length} connected after 60 s`);
    await stop();
  }
  await new Promise((r) => setTimeout(r, 20));
}
process.stdout.write(`${JSON.stringify({ ready: agents.length })}\n`);
