/**
 * Optional TLS on the gRPC port (GANTRY_GRPC_TLS_CERT/KEY): the agent connects with --ca; plaintext
 * does not. The WebSocket transport's TLS is the proxy's in front of the HTTP port: a TLS terminator
 * (node:tls piping to the node) stands in for it, and `--server wss://` with --ca connects through it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import net from 'node:net';
import tls from 'node:tls';
import { readFileSync } from 'node:fs';
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

test('wss: an agent with --ca connects through a TLS proxy in front of the HTTP port; one without it (a private CA) does not', async (t) => {
  const dir = tmpDir('gantry-wss-');
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'], { stdio: 'pipe' });
  } catch {
    t.skip('openssl is not available');
    return;
  }
  const n = await startTestNode({}, 'agents_wss');
  // TLS terminated here, plain HTTP/1.1 (and the upgrade) to the node, as an ingress does
  const proxy = tls.createServer({ cert: readFileSync(cert), key: readFileSync(key) }, (c) => {
    const up = net.connect(n.node.httpPort, '127.0.0.1');
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
  const port = (proxy.address() as net.AddressInfo).port;
  const logger = createLogger('silent');
  const base = ['--server', `wss://127.0.0.1:${port}`, '--executor', 'simulate', '--state-dir', tmpDir('gantry-state-')];
  try {
    const s = await setupTeam(n);
    const untrusted = await startAgent(parseAgentArgs([...base, '--credential', s.ak.value, '--machine-id', 'no-ca'])!, { logger, noGpuProbe: true, rescanMs: 0 });
    const trusted = await startAgent(parseAgentArgs([...base, '--credential', s.ak.value, '--machine-id', 'wss', '--ca', cert])!, { logger, noGpuProbe: true, rescanMs: 0 });
    await waitFor('wss agent connected', () => trusted.client.connected, 15_000);
    assert.equal(trusted.client.transportKind, 'ws');
    assert.deepEqual((await agentsOf(n, s)).map((a) => a.machine_id), ['wss']);
    assert.equal(untrusted.client.connected, false);
    await Promise.all([untrusted.stop(), trusted.stop()]);
  } finally {
    proxy.close();
    await n.stop();
  }
});
