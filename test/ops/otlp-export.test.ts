// GANTRY_TRACING=otlp: the node exports its spans over OTLP/HTTP (protobuf) to the endpoint the
// standard OTEL_EXPORTER_OTLP_ENDPOINT names. A collector stand-in on loopback receives them: the
// request line and content type of the OTLP protocol, and a body (an ExportTraceServiceRequest)
// holding the names of the spans the node made and its service name. The node flushes at close.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestNode } from '../helpers/node.js';
import { tracingEnabled } from '../../src/shared/tracing.js';

test('spans reach an OTLP collector (POST /v1/traces, application/x-protobuf) and stop with the node', async () => {
  const received: Array<{ url: string; type: string; body: Buffer }> = [];
  const collector = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ url: req.url ?? '', type: String(req.headers['content-type']), body: Buffer.concat(chunks) });
      res.writeHead(200, { 'content-type': 'application/x-protobuf' });
      res.end();
    });
  });
  await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
  const port = (collector.address() as AddressInfo).port;
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${port}`;
  process.env.OTEL_SERVICE_NAME = 'gantry-otlp-test';
  try {
    assert.equal(tracingEnabled(), false, 'off until a node starts with GANTRY_TRACING=otlp');
    const t = await startTestNode({ GANTRY_TRACING: 'otlp' }, 'otlp');
    assert.equal(tracingEnabled(), true);
    const r = await fetch(`${t.origin}/readyz`, { headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' } });
    assert.equal(r.status, 200);
    await t.stop();
    assert.equal(tracingEnabled(), false, 'the node\'s close shut the SDK down');
    assert.ok(received.length >= 1, 'the collector received an export');
    const all = Buffer.concat(received.map((x) => x.body));
    for (const x of received) {
      assert.equal(x.url, '/v1/traces');
      assert.match(x.type, /application\/x-protobuf/);
    }
    assert.ok(all.includes('GET /readyz'), 'the request span was exported');
    assert.ok(all.includes('gantry-otlp-test'), 'OTEL_SERVICE_NAME names the service');
    assert.ok(all.includes(Buffer.from('0af7651916cd43dd8448eb211c80319c', 'hex')), 'in the caller\'s trace (trace id bytes)');
    assert.ok(all.includes('pg SELECT'), 'the readiness check\'s SQL span');
  } finally {
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    delete process.env.OTEL_SERVICE_NAME;
    await new Promise((r) => collector.close(r));
  }
});
