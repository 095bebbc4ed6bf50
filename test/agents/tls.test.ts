/** Optional TLS on the gRPC port (GANTRY_GRPC_TLS_CERT/KEY): the agent connects with --ca; plaintext does not. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { startTestNode } from '../helpers/node.js';
import { createLogger } from '../../src/shared/logger.js';
import { parseAgentArgs, startAgent } from '../../src/agent/main.js';
import { agentsOf, setupTeam, tmpDir, waitFor } from './helpers.js';

test('TLS: an agent with --ca connects; a plaintext agent does not', async (t) => {
  const dir = tmpDir('gantry-tls-');
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'], { stdio: 'pipe' });
  } catch {
    t.skip('openssl is not available');
    return;
  }
  const n = await startTestNode({ GANTRY_GRPC_TLS_CERT: cert, GANTRY_GRPC_TLS_KEY: key }, 'agents_tls');
  const logger = createLogger('silent');
  const base = ['--server', `127.0.0.1:${n.node.grpcPort}`, '--executor', 'simulate', '--state-dir', tmpDir('gantry-state-')];
  try {
    const s = await setupTeam(n);
    const plain = await startAgent(parseAgentArgs([...base, '--credential', s.ak.value, '--machine-id', 'plain'])!, { logger, noGpuProbe: true, rescanMs: 0 });
    const tls = await startAgent(parseAgentArgs([...base, '--credential', s.ak.value, '--machine-id', 'tls', '--ca', cert])!, { logger, noGpuProbe: true, rescanMs: 0 });
    await waitFor('TLS agent connected', () => tls.client.connected, 15_000);
    const agents = await agentsOf(n, s);
    assert.deepEqual(agents.map((a) => a.machine_id), ['tls']);
    assert.equal(plain.client.connected, false);
    await Promise.all([plain.stop(), tls.stop()]);
  } finally {
    await n.stop();
  }
});
