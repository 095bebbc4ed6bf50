// Request framing at the edge (issue 12, fault 3): raw TCP against a real node. RFC 9112 §6.3: a
// request with differing Content-Length values is answered 400 and the connection closed (no
// second request parsed from the body: request smuggling behind a proxy that uses the last one);
// §3.2: a missing, repeated or invalid Host is 400; RFC 9110 §5.5: control characters in a field
// value are invalid.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { rawHttp, statuses, firstResponse } from './raw-http.js';

let t: TestNode;
let port: number;
// every socket test is bounded: a connection left hanging fails here, not at the runner's timeout
const BOUND_MS = 5_000;

before(async () => {
  t = await startTestNode({}, 'framing');
  port = t.node.httpPort;
});
after(async () => {
  await t.stop();
});

const login = (lengths: number[], body: string, tail = ''): string =>
  `POST /api/v1/auth/login HTTP/1.1\r\nHost: gantry.test\r\nContent-Type: application/json\r\n${lengths.map((n) => `Content-Length: ${n}\r\n`).join('')}\r\n${body}${tail}`;

function assertRejected(r: Awaited<ReturnType<typeof rawHttp>>, code: string): void {
  assert.equal(r.timedOut, false, `the connection must be closed by the server, got ${JSON.stringify(r.data)}`);
  assert.equal(r.closed, true);
  assert.deepEqual(statuses(r.data), [400], `exactly one response, a 400: ${JSON.stringify(r.data)}`);
  const res = firstResponse(r.data);
  assert.equal(res.headers.connection, 'close');
  assert.match(res.headers['content-type'] ?? '', /^application\/json/);
  const body = JSON.parse(res.body) as { error_code: string; error_message: string };
  assert.equal(body.error_code, code);
  assert.equal(typeof body.error_message, 'string');
}

test('two differing Content-Length headers: 400 conflicting_content_length and the connection is closed', async () => {
  assertRejected(await rawHttp(port, [login([2, 40], '{}')], BOUND_MS), 'conflicting_content_length');
  // the larger one first: answered at the headers, without waiting for a body that never comes
  assertRejected(await rawHttp(port, [login([40, 2], '{}')], BOUND_MS), 'conflicting_content_length');
});

test('a request smuggled behind differing Content-Lengths is never routed', async () => {
  const smuggled = 'GET /healthz HTTP/1.1\r\nHost: gantry.test\r\n\r\n';
  for (const parts of [[login([2, 40], '{}', smuggled)], [login([2, 40], '{}'), smuggled]]) {
    const r = await rawHttp(port, parts, BOUND_MS);
    assert.equal(r.timedOut, false, `the connection must be closed, got ${JSON.stringify(r.data)}`);
    assert.ok(!statuses(r.data).includes(200), `the smuggled GET /healthz must not be answered: ${JSON.stringify(r.data)}`);
    assert.ok(!r.data.includes('"status":"ok"'));
  }
});

test('repeated identical Content-Length headers are one length (RFC 9110 §8.6): the request is served', async () => {
  const r = await rawHttp(port, [login([2, 2], '{}')], BOUND_MS, true);
  assert.equal(r.closed, false, 'a valid request keeps the connection');
  const res = firstResponse(r.data);
  // the route saw the JSON body {} and validated it
  assert.equal(res.status, 400);
  assert.equal((JSON.parse(res.body) as { error_code: string }).error_code, 'invalid_parameter');
});

test('a control character (DEL) in a header value: 400 invalid_header_value and close', async () => {
  const r = await rawHttp(port, ['GET /healthz HTTP/1.1\r\nHost: gantry.test\r\nX-Note: a\x7fb\r\n\r\n'], BOUND_MS);
  assertRejected(r, 'invalid_header_value');
});

test('two Host headers, or a Host that is not a host[:port]: 400 invalid_host_header and close', async () => {
  assertRejected(await rawHttp(port, ['GET /healthz HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n'], BOUND_MS), 'invalid_host_header');
  assertRejected(await rawHttp(port, ['GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n'], BOUND_MS), 'invalid_host_header');
  assertRejected(await rawHttp(port, ['GET /healthz HTTP/1.1\r\nHost: a/b\r\n\r\n'], BOUND_MS), 'invalid_host_header');
});

test('valid edge cases stay accepted: an empty Host, HTAB in a value, an IPv6 literal host with port', async () => {
  for (const req of [
    'GET /healthz HTTP/1.1\r\nHost:\r\n\r\n',
    'GET /healthz HTTP/1.1\r\nHost: gantry.test\r\nX-Note: a\tb\r\n\r\n',
    'GET /healthz HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n',
  ]) {
    const r = await rawHttp(port, [req], BOUND_MS, true);
    assert.equal(r.closed, false, JSON.stringify(req));
    assert.equal(firstResponse(r.data).status, 200, `${JSON.stringify(req)} -> ${JSON.stringify(r.data)}`);
  }
});

// Documented limitation of the pinned uWebSockets.js build (npm uwebsockets@3.0.6, source commit
// b8704be): its parser drops these requests before any JavaScript callback runs (no handler, no
// App option, no hook to answer them), so the node cannot send the 400 the RFC asks for. What the
// build does instead, asserted exactly: nothing is written and uWS closes the connection at its
// HTTP idle timeout (~10 s). Nothing reaches the router. A build that answers them would fail this
// test: then assert 400 and close here. The reverse proxy in deploy/nginx answers them itself.
test('uWS limitation: missing Host, NUL or \\x01 in a value, "Transfer-Encoding :" get no answer and are closed by uWS idle timeout', async () => {
  const cases: Record<string, string> = {
    'missing Host': 'GET /healthz HTTP/1.1\r\n\r\n',
    'NUL in a value': 'GET /healthz HTTP/1.1\r\nHost: gantry.test\r\nX-Note: a\x00b\r\n\r\n',
    '\\x01 in a value': 'GET /healthz HTTP/1.1\r\nHost: gantry.test\r\nX-Note: a\x01b\r\n\r\n',
    'space before the colon': 'POST /api/v1/auth/login HTTP/1.1\r\nHost: gantry.test\r\nTransfer-Encoding : chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n',
    'obsolete line folding': 'GET /healthz HTTP/1.1\r\nHost: gantry.test\r\nX-Note: a\r\n b\r\n\r\n',
  };
  const results = await Promise.all(Object.entries(cases).map(async ([name, req]) => [name, await rawHttp(port, [req], 30_000)] as const));
  for (const [name, r] of results) {
    assert.equal(r.timedOut, false, `${name}: the connection must not stay open`);
    assert.equal(r.closed, true, name);
    assert.equal(r.data, '', `${name}: this uWS build answers nothing; got ${JSON.stringify(r.data)}`);
  }
});

// Issue 29, point 8: RFC 9112 §6.1 — chunked is the final coding, applied once, and the node decodes
// no other. uWS hands these headers to JavaScript, so the node refuses them itself.
test('Transfer-Encoding other than exactly "chunked" (chunked, identity / gzip, chunked / chunked twice): 400 invalid_transfer_encoding and close, never routed', async () => {
  const post = (te: string[]): string =>
    `POST /api/v1/auth/login HTTP/1.1\r\nHost: gantry.test\r\nContent-Type: application/json\r\n${te.map((v) => `Transfer-Encoding: ${v}\r\n`).join('')}\r\n2\r\n{}\r\n0\r\n\r\n`;
  for (const te of [['chunked, identity'], ['gzip, chunked'], ['chunked', 'chunked'], ['chunked,chunked'], ['Chunked, Identity']]) {
    const r = await rawHttp(port, [post(te)], BOUND_MS);
    assertRejected(r, 'invalid_transfer_encoding');
    // the login route would have answered 400 invalid_parameter for {}: it was not reached
    assert.ok(!r.data.includes('invalid_parameter'), `${te.join(' + ')}: not routed`);
  }
  // control: exactly chunked (any case) is decoded and routed
  for (const te of ['chunked', 'CHUNKED']) {
    const ok = firstResponse((await rawHttp(port, [post([te])], BOUND_MS, true)).data);
    assert.equal(ok.status, 400);
    assert.equal((JSON.parse(ok.body) as { error_code: string }).error_code, 'invalid_parameter', `${te}: routed, the body {} validated`);
  }
});

// Decided by the pinned uWebSockets.js parser before any JavaScript runs (README, "Reverse proxy"):
// asserted exactly as this build behaves, so a build that changes it fails here and the README is
// updated. deploy/nginx in front normalises the target and re-frames the body.
test('uWS limitation: chunk data without its CRLF is accepted; an absolute-form target gets uWS\'s own 505', async () => {
  const lenient = await rawHttp(port, ['POST /api/v1/auth/login HTTP/1.1\r\nHost: gantry.test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}0\r\n\r\n'], BOUND_MS, true);
  const res = firstResponse(lenient.data);
  assert.equal(res.status, 400);
  assert.equal((JSON.parse(res.body) as { error_code: string }).error_code, 'invalid_parameter', 'this uWS build de-chunks it and the route sees {}');
  for (const target of ['http://gantry.test/healthz', 'http://gantry.test/api/v1/server-info']) {
    const r = await rawHttp(port, [`GET ${target} HTTP/1.1\r\nHost: gantry.test\r\n\r\n`], BOUND_MS);
    assert.equal(r.closed, true);
    assert.deepEqual(statuses(r.data), [505], `${target}: ${JSON.stringify(r.data)}`);
    assert.ok(!r.data.includes('X-Request-ID'), 'answered by uWS, not by the node');
  }
});
