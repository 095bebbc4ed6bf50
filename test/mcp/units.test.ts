/** The MCP pieces that need no node: session tokens and the parameters' JSON Schema. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { SESSION_MAX_AGE_MS, SessionTokens } from '../../src/mcp/session.js';
import { parametersJsonSchema } from '../../src/domain/workflows/parameters.js';
import type { NormalizedParameterDef } from '../../src/domain/workflows/schema.js';

test('session tokens: verify what was issued; a changed byte, another secret or an old token does not verify', () => {
  let now = 1_700_000_000_000;
  const secret = randomBytes(32);
  const tokens = new SessionTokens(secret, () => now);
  const t = tokens.issue({ credentialId: 'cred-1', teamId: 'team-1' });
  assert.match(t, /^m1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
  assert.deepEqual(tokens.verify(t), { credentialId: 'cred-1', teamId: 'team-1', issuedAt: now });
  assert.notEqual(tokens.issue({ credentialId: 'cred-1', teamId: 'team-1' }), t, 'each session id is new');
  // another node with the same secret accepts it
  assert.ok(new SessionTokens(Buffer.from(secret), () => now).verify(t));
  assert.equal(new SessionTokens(randomBytes(32), () => now).verify(t), null);
  const [v, payload, sig] = t.split('.') as [string, string, string];
  const forgedPayload = Buffer.from(JSON.stringify({ c: 'cred-2', t: 'team-1', i: now, n: 'x' })).toString('base64url');
  assert.equal(tokens.verify(`${v}.${forgedPayload}.${sig}`), null);
  assert.equal(tokens.verify(`${v}.${payload}.${sig.slice(0, -1)}${sig.endsWith('A') ? 'B' : 'A'}`), null);
  for (const junk of ['', 'm1..', 'abc', `${t}x`, `m2.${payload}.${sig}`]) assert.equal(tokens.verify(junk), null, junk);
  now += SESSION_MAX_AGE_MS + 1;
  assert.equal(tokens.verify(t), null, 'expired');
});

test("a workflow's parameters as a JSON Schema: types, required, min/max, options, defaults, descriptions", () => {
  const params = [
    { key: 'prompt', type: 'string', required: true, description: 'What to draw', label: 'Prompt' },
    { key: 'steps', type: 'integer', min: 1, max: 50, default: 20 },
    { key: 'cfg', type: 'number', min: 0 },
    { key: 'sampler', type: 'string', options: ['euler', 'dpm'], default: 'euler', required: true },
    { key: 'hires', type: 'boolean' },
    { key: 'image', type: 'file', required: true, accept: ['image/*'] },
    { key: 'extra', type: 'json' },
    { key: 'negative', type: 'string', source_key: 'prompt', required: true },
  ] as NormalizedParameterDef[];
  const s = parametersJsonSchema(params);
  assert.equal(s.type, 'object');
  assert.equal(s.additionalProperties, false);
  assert.deepEqual(s.required, ['prompt', 'image'], 'a default or a source_key makes a parameter optional');
  assert.deepEqual(s.properties.prompt, { type: 'string', title: 'Prompt', description: 'What to draw' });
  assert.deepEqual(s.properties.steps, { type: 'integer', minimum: 1, maximum: 50, default: 20 });
  assert.deepEqual(s.properties.cfg, { type: 'number', minimum: 0 });
  assert.deepEqual(s.properties.sampler, { type: 'string', enum: ['euler', 'dpm'], default: 'euler' });
  assert.deepEqual(s.properties.hires, { type: 'boolean' });
  assert.equal(s.properties.image?.type, 'string');
  assert.match(String(s.properties.image?.description), /create_upload.*image\/\*/s);
  assert.deepEqual(s.properties.extra, {});
  assert.match(String(s.properties.negative?.description), /"prompt"/);
});
