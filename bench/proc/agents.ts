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
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../src/shared/logger.js';
import { parseAgentArgs, startAgent, type RunningAgent } from '../../src/agent/main.js';

const [server, credential, nAgents = '16', nSlots = '8'] = process.argv.slice(2);
if (!server || !credential) {
  console.error('usage: agents.ts <host:port> <ak-credential> [agents] [slots]');
  process.exit(2);
}
const dir = mkdtempSync(join(os.tmpdir(), 'gantry-p4-agents-'));
const logger = createLogger('silent');
const agents: RunningAgent[] = [];

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
  agents.push(await startAgent(cfg, { logger, noGpuProbe: true, rescanMs: 0 }));
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
