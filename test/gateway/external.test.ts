/**
 * External container services through a node: a local HTTPS server (test CA) stands in for the
 * external API; the node allowlists 127.0.0.1 and trusts the CA. The vault's header is injected on
 * the way out and never shown; proxy and invoke both reach it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import https from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { setupTeam, type TeamSetup } from '../agents/helpers.js';
import { makePki, type Pki } from '../events/helpers.js';

const hasOpenssl = spawnSync('openssl', ['version'], { stdio: 'ignore' }).status === 0;
const skip = hasOpenssl ? false : 'openssl is not installed: the test cannot make its TLS certificates';
const SECRET = 'Bearer ext-secret-9876543210';

let t: TestNode;
let s: TeamSetup;
let pki: Pki;
let api: https.Server;
let wss: WebSocketServer;
let port = 0;
const wsSeen: IncomingHttpHeaders[] = [];
const seen: Array<{ url: string; headers: IncomingHttpHeaders; body: string }> = [];
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });

before(async () => {
  if (skip) return;
  pki = makePki();
  api = https.createServer({ key: pki.key, cert: pki.cert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({ url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString() });
      res.writeHead(req.url?.includes('missing') ? 404 : 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ url: req.url, method: req.method }));
    });
  });
  // WebSocket on the same HTTPS server: /v1/echo echoes (text and binary) and closes with the code it is asked for;
  // /v1/refuse answers the upgrade with 403 and a body
  wss = new WebSocketServer({ noServer: true, handleProtocols: (ps) => (ps.has('chat.v2') ? 'chat.v2' : false) });
  api.on('upgrade', (req, socket, head) => {
    wsSeen.push(req.headers);
    if (!req.url?.startsWith('/v1/echo')) {
      socket.end('HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{"error":"nope"}\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.send(`hello ${req.url}`);
      ws.on('message', (data, binary) => {
        const text = data.toString();
        if (!binary && text.startsWith('close ')) ws.close(Number(text.slice(6)), 'asked to');
        else ws.send(data, { binary });
      });
    });
  });
  await new Promise<void>((r) => api.listen(0, '127.0.0.1', r));
  port = (api.address() as AddressInfo).port;
  t = await startTestNode({ GANTRY_OUTBOUND_ALLOWLIST: '127.0.0.1', GANTRY_OUTBOUND_CA_FILE: pki.caFile }, 'gw_external');
  s = await setupTeam(t);
});

after(async () => {
  if (skip) return;
  await t.stop();
  for (const c of wss.clients) c.terminate();
  wss.close();
  api.closeAllConnections();
  await new Promise((r) => api.close(r));
  pki.cleanup();
});

test('an external service: deploy makes it running at once; proxy and invoke go out with the vault header', { skip }, async () => {
  const cred = await t.http.post('/vault/credentials', { display_name: 'ext api key', header_name: 'Authorization', header_value: SECRET }, mgmt());
  assert.equal(cred.status, 200, 'vault: ' + cred.text);
  const plain = await t.http.post('/containers', { service_slug: 'plain', display_name: 'x', service_type: 'external', external_url: `http://127.0.0.1:${port}/v1` }, mgmt());
  assert.equal(plain.status, 400, 'http:// external URLs are refused');
  const other = await setupTeam(t);
  const otherCred = await t.http.post('/vault/credentials', { display_name: 'theirs', header_name: 'X-Key', header_value: 'their-secret-value' }, { token: other.user.accessToken, team: other.user.teamId });
  const foreign = await t.http.post('/containers', { service_slug: 'foreign', display_name: 'x', service_type: 'external', external_url: `https://127.0.0.1:${port}/v1`, external_auth_credential_id: otherCred.body.id }, mgmt());
  assert.equal(foreign.status, 400, 'another team\'s vault credential cannot be referenced');

  const r = await t.http.post('/containers', { service_slug: 'ext', display_name: 'external api', service_type: 'external', external_url: `https://127.0.0.1:${port}/v1`, external_auth_credential_id: cred.body.id }, mgmt());
  assert.equal(r.status, 200, r.text);
  const id = r.body.id as string;
  const before = await t.http.post('/r/invoke/ext', { method: 'GET', path: '/x' }, { token: s.sk.value });
  assert.equal(before.status, 400, 'created, not running');
  const dep = await t.http.post(`/containers/${id}/deploy`, {}, mgmt());
  assert.equal(dep.status, 200, dep.text);
  assert.equal(dep.body.service_status, 'running');

  const p = await fetch(`${t.baseUrl}/r/containers/ext/models?limit=2`, { method: 'POST', headers: { authorization: `Bearer ${s.sk.value}`, 'content-type': 'application/json' }, body: '{"q":1}' });
  assert.equal(p.status, 200);
  assert.deepEqual(await p.json(), { url: '/v1/models?limit=2', method: 'POST' });
  const last = seen.at(-1)!;
  assert.equal(last.headers.authorization, SECRET, 'the vault header replaced the caller\'s credential');
  assert.equal(last.body, '{"q":1}');
  const miss = await fetch(`${t.baseUrl}/r/containers/ext/missing`, { headers: { authorization: `Bearer ${s.sk.value}` } });
  assert.equal(miss.status, 404, 'the external service\'s own status');
  const inv = await t.http.post('/r/invoke/ext', { method: 'GET', path: '/models' }, { token: s.sk.value });
  assert.equal(inv.status, 200, inv.text);
  assert.equal(inv.body.status_code, 200);
  assert.equal(seen.at(-1)!.headers.authorization, SECRET);
  // the secret is never shown: not on the service, not on the credential
  for (const path of [`/containers/${id}`, '/vault/credentials', `/vault/credentials/${cred.body.id}`]) {
    const g = await t.http.get(path, mgmt());
    assert.equal(g.status, 200, g.text);
    assert.ok(!g.text.includes('ext-secret'), path);
  }
  // stop: 400 on the proxy
  assert.equal((await t.http.post(`/containers/${id}/stop`, {}, mgmt())).body.service_status, 'stopped');
  assert.equal((await fetch(`${t.baseUrl}/r/containers/ext/models`, { headers: { authorization: `Bearer ${s.sk.value}` } })).status, 400);
});

test('an external URL the outbound guard refuses: 400 external_url_not_allowed at create and update (as for webhooks); a stored one is still refused at use (502 egress_refused)', { skip }, async () => {
  for (const u of ['https://169.254.169.254/latest', 'https://10.0.0.1/v1', 'https://[::ffff:169.254.169.254]/', 'https://127.0.0.2:9/v1']) {
    const c = await t.http.post('/containers', { service_slug: 'meta', display_name: 'x', service_type: 'external', external_url: u }, mgmt());
    assert.equal(c.status, 400, `${u}: ${c.text}`);
    assert.equal(c.body.error_code, 'external_url_not_allowed', u);
    assert.match(c.body.error_message, /^external_url: /, u);
  }
  // an allowed URL is accepted; moving it to a refused address is refused too
  const r = await t.http.post('/containers', { service_slug: 'meta', display_name: 'x', service_type: 'external', external_url: `https://127.0.0.1:${port}/v1` }, mgmt());
  assert.equal(r.status, 200, r.text);
  const up = await t.http.put(`/containers/${r.body.id}`, { external_url: 'https://169.254.169.254/latest' }, mgmt());
  assert.equal(up.status, 400, up.text);
  assert.equal(up.body.error_code, 'external_url_not_allowed');
  assert.equal((await t.http.get(`/containers/${r.body.id}`, mgmt())).body.external_url, `https://127.0.0.1:${port}/v1`, 'unchanged');
  // the use-time guard stays: a stored URL that now points where the guard refuses (a row written
  // before the create-time check existed, or DNS that changed since) is refused, not called
  await t.node.db.execute(`update container_services set external_url = 'https://169.254.169.254/latest' where id = ?`, [r.body.id]);
  await t.http.post(`/containers/${r.body.id}/deploy`, {}, mgmt());
  const p = await fetch(`${t.baseUrl}/r/containers/meta/meta-data`, { headers: { authorization: `Bearer ${s.sk.value}` } });
  assert.equal(p.status, 502);
  assert.equal(((await p.json()) as Record<string, string>).error_code, 'egress_refused');
});

test('WebSocket to an external service: relayed through the guard with the vault header; frames and close codes both ways; a refused upgrade comes back as the service answered', { skip }, async () => {
  const cred = await t.http.post('/vault/credentials', { display_name: 'ws key', header_name: 'X-Api-Key', header_value: 'ws-vault-secret-1234567' }, mgmt());
  assert.equal(cred.status, 200, cred.text);
  const r = await t.http.post('/containers', { service_slug: 'extws', display_name: 'external ws', service_type: 'external', external_url: `https://127.0.0.1:${port}/v1`, external_auth_credential_id: cred.body.id }, mgmt());
  assert.equal(r.status, 200, r.text);
  assert.equal((await t.http.post(`/containers/${r.body.id}/deploy`, {}, mgmt())).body.service_status, 'running');
  const wsUrl = (path: string) => `${t.baseUrl.replace(/^http/, 'ws')}/r/containers/extws${path}`;

  const ws = new WebSocket(wsUrl('/echo?room=7'), ['chat.v2'], { headers: { authorization: `Bearer ${s.sk.value}`, 'x-api-key': 'caller-tries-its-own' } });
  const got: Array<{ data: string; binary: boolean }> = [];
  ws.on('message', (d, binary) => got.push({ data: d.toString(), binary }));
  await new Promise<void>((res, rej) => {
    ws.once('open', () => res());
    ws.once('error', rej);
  });
  assert.equal(ws.protocol, 'chat.v2', 'the subprotocol the service chose');
  const h = wsSeen.at(-1)!;
  assert.equal(h['x-api-key'], 'ws-vault-secret-1234567', 'the vault header replaced the caller\'s value');
  assert.equal(h.authorization, undefined, 'Gantry\'s own credential is not forwarded');
  ws.send('ping');
  ws.send(Buffer.from([1, 2, 3]));
  const until = async (n: number) => {
    for (let i = 0; i < 200 && got.length < n; i++) await new Promise((res) => setTimeout(res, 25));
  };
  await until(3);
  assert.deepEqual(got, [
    { data: 'hello /v1/echo?room=7', binary: false },
    { data: 'ping', binary: false },
    { data: Buffer.from([1, 2, 3]).toString(), binary: true },
  ]);
  const closed = new Promise<[number, string]>((res) => ws.once('close', (code, reason) => res([code, reason.toString()])));
  ws.send('close 4001');
  assert.deepEqual(await closed, [4001, 'asked to'], 'the service\'s close code and reason reach the client');

  // the service refuses the upgrade: its status and body come back
  const refused = await new Promise<{ status: number; body: string }>((res, rej) => {
    const w = new WebSocket(wsUrl('/private'), { headers: { authorization: `Bearer ${s.sk.value}` } });
    w.once('unexpected-response', (_req, resp) => {
      let body = '';
      resp.on('data', (c: Buffer) => (body += c.toString()));
      resp.on('end', () => res({ status: resp.statusCode ?? 0, body }));
    });
    w.once('open', () => rej(new Error('opened')));
  });
  assert.deepEqual(refused, { status: 403, body: '{"error":"nope"}\n' });

  // no credential: 401 before anything goes out
  const before = wsSeen.length;
  const anon = await new Promise<number>((res) => {
    const w = new WebSocket(wsUrl('/echo'));
    w.once('unexpected-response', (_req, resp) => res(resp.statusCode ?? 0));
    w.once('error', () => res(-1));
  });
  assert.equal(anon, 401);
  assert.equal(wsSeen.length, before);

  // a service the guard refuses at use (as for HTTP): 502 egress_refused, nothing leaves
  assert.equal((await t.http.post(`/containers/${r.body.id}/stop`, {}, mgmt())).body.service_status, 'stopped');
  await t.node.db.execute(`update container_services set external_url = 'https://169.254.169.254/latest' where id = ?`, [r.body.id]);
  assert.equal((await t.http.post(`/containers/${r.body.id}/deploy`, {}, mgmt())).body.service_status, 'running');
  const blocked = await new Promise<{ status: number; body: string }>((res, rej) => {
    const w = new WebSocket(wsUrl('/echo'), { headers: { authorization: `Bearer ${s.sk.value}` } });
    w.once('open', () => rej(new Error('opened: the stored URL was not re-read')));
    w.once('error', rej);
    w.once('unexpected-response', (_req, resp) => {
      let body = '';
      resp.on('data', (c: Buffer) => (body += c.toString()));
      resp.on('end', () => res({ status: resp.statusCode ?? 0, body }));
    });
  });
  assert.equal(blocked.status, 502, blocked.body);
  assert.equal((JSON.parse(blocked.body) as Record<string, string>).error_code, 'egress_refused');
});
