/**
 * The lint zones (eslint.config.js, import-x/no-restricted-paths) fail on an import that runs back
 * up a layer. Each case lints a small synthetic source, placed at a path inside a layer, through
 * the project's own ESLint config; the file does not need to exist (type-aware rules are turned
 * off for these synthetic files, the zone rule only needs the import to resolve).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';

const root = fileURLToPath(new URL('../..', import.meta.url));

const eslint = new ESLint({
  cwd: root,
  overrideConfig: [
    {
      files: ['**/*.ts'],
      languageOptions: { parserOptions: { projectService: false, project: null } },
      rules: { '@typescript-eslint/no-floating-promises': 'off', '@typescript-eslint/no-misused-promises': 'off' },
    },
  ],
});

/** The zone violations ESLint reports for `source` placed at `filePath` (relative to the root). */
async function zoneErrors(filePath: string, source: string): Promise<string[]> {
  const [r] = await eslint.lintText(source, { filePath: `${root}/${filePath}` });
  assert.ok(r, 'eslint returned no result');
  const fatal = r.messages.filter((m) => m.fatal);
  assert.deepEqual(fatal, [], `parse error in the synthetic source for ${filePath}`);
  return r.messages.filter((m) => m.ruleId === 'import-x/no-restricted-paths').map((m) => m.message);
}

const importing = (spec: string): string => `import * as m from '${spec}';\nexport const used = m;\n`;

const forbidden: Array<{ name: string; file: string; spec: string; says: RegExp }> = [
  { name: 'events -> edge', file: 'src/events/zone-probe.ts', spec: '../edge/http.js', says: /events must not import the edge/ },
  { name: 'files -> edge', file: 'src/files/zone-probe.ts', spec: '../edge/agents/sessions.js', says: /files must not import the edge/ },
  { name: 'identity -> edge', file: 'src/identity/zone-probe.ts', spec: '../edge/error-map.js', says: /identity must not import the edge/ },
  { name: 'edge -> agent program', file: 'src/edge/agents/zone-probe.ts', spec: '../../agent/runner.js', says: /the edge must not import the agent program/ },
  { name: 'actors -> persistence', file: 'src/actors/task/zone-probe.ts', spec: '../../persistence/db.js', says: /actors must not import persistence/ },
  { name: 'domain -> edge', file: 'src/domain/workflows/zone-probe.ts', spec: '../../edge/error-map.js', says: /domain must not import the edge/ },
  { name: 'protocol -> edge', file: 'src/protocol/zone-probe.ts', spec: '../edge/error-map.js', says: /src\/protocol may import only/ },
  { name: 'protocol -> agent program', file: 'src/protocol/zone-probe.ts', spec: '../agent/runner.js', says: /src\/protocol may import only/ },
  { name: 'agent program -> edge', file: 'src/agent/zone-probe.ts', spec: '../edge/agents/grpc-server.js', says: /the agent program must not import the server edge/ },
  { name: 'route -> persistence', file: 'src/edge/routes/zone-probe.ts', spec: '../../persistence/task-queries.js', says: /the edge is a face/ },
  { name: 'agent server -> persistence', file: 'src/edge/agents/zone-probe.ts', spec: '../../persistence/agent-store.js', says: /the edge is a face/ },
  { name: 'app -> persistence', file: 'src/app/zone-probe.ts', spec: '../persistence/task-queries.js', says: /the application layer declares the store ports/ },
  { name: 'mcp -> persistence', file: 'src/mcp/zone-probe.ts', spec: '../persistence/task-queries.js', says: /MCP tools are thin adapters/ },
  { name: 'mcp -> edge', file: 'src/mcp/zone-probe.ts', spec: '../edge/http.js', says: /MCP must not import the edge/ },
  { name: 'app -> edge', file: 'src/app/zone-probe.ts', spec: '../edge/http.js', says: /the application layer must not import a face \(src\/edge\)/ },
  { name: 'app -> mcp', file: 'src/app/zone-probe.ts', spec: '../mcp/server.js', says: /the application layer must not import a face \(src\/mcp\)/ },
  { name: 'app -> composition root', file: 'src/app/zone-probe.ts', spec: '../node/lifecycle.js', says: /must not import the composition root/ },
];

for (const c of forbidden) {
  test(`zone: ${c.name} is reported by import-x/no-restricted-paths`, async () => {
    const errs = await zoneErrors(c.file, importing(c.spec));
    assert.equal(errs.length, 1, `expected one zone error for ${c.file} importing ${c.spec}, got ${JSON.stringify(errs)}`);
    assert.match(errs[0] ?? '', c.says);
  });
}

const allowed: Array<{ name: string; file: string; spec: string }> = [
  { name: 'edge -> protocol', file: 'src/edge/agents/zone-probe.ts', spec: '../../protocol/agent-wire.js' },
  { name: 'agent program -> protocol', file: 'src/agent/zone-probe.ts', spec: '../protocol/agent-wire.js' },
  { name: 'protocol -> shared', file: 'src/protocol/zone-probe.ts', spec: '../shared/errors.js' },
  { name: 'events -> shared', file: 'src/events/zone-probe.ts', spec: '../shared/errors.js' },
  { name: 'edge -> files', file: 'src/edge/routes/zone-probe.ts', spec: '../../files/index.js' },
  { name: 'edge -> events', file: 'src/edge/routes/zone-probe.ts', spec: '../../events/sse.js' },
  { name: 'route -> app', file: 'src/edge/routes/zone-probe.ts', spec: '../../app/tasks.js' },
  { name: 'mcp -> app', file: 'src/mcp/zone-probe.ts', spec: '../app/tasks.js' },
  { name: 'app -> gateway core', file: 'src/app/zone-probe.ts', spec: '../gateway/invoke.js' },
  { name: 'app -> domain', file: 'src/app/zone-probe.ts', spec: '../domain/idempotency.js' },
  { name: 'composition root -> persistence', file: 'src/node/zone-probe.ts', spec: '../persistence/task-queries.js' },
];

for (const c of allowed) {
  test(`zone: ${c.name} is allowed`, async () => {
    assert.deepEqual(await zoneErrors(c.file, importing(c.spec)), []);
  });
}

test('every forbidden case imports a real module (the zone rule judges only imports it resolves)', () => {
  for (const c of forbidden) {
    const target = fileURLToPath(new URL(c.spec.replace(/\.js$/, '.ts'), new URL(c.file, `file://${root}/`)));
    assert.ok(existsSync(target), `${c.name}: ${c.spec} from ${c.file} does not resolve to a file (${target})`);
  }
});

/** Messages of one rule for `source` placed at `filePath`. */
async function ruleErrors(rule: string, filePath: string, source: string): Promise<string[]> {
  const [r] = await eslint.lintText(source, { filePath: `${root}/${filePath}` });
  assert.ok(r, 'eslint returned no result');
  return r.messages.filter((m) => m.ruleId === rule).map((m) => m.message);
}

test('SQL only in store modules: a files module importing the SQL helpers is reported; the files store may', async () => {
  const rule = '@typescript-eslint/no-restricted-imports';
  const bad = await ruleErrors(rule, 'src/files/zone-probe.ts', importing('../persistence/sql.js'));
  assert.equal(bad.length, 1, JSON.stringify(bad));
  assert.match(bad[0] ?? '', /SQL only in store modules/);
  assert.equal((await ruleErrors(rule, 'src/files/zone-probe.ts', `import { Database } from '../persistence/db.js';\nexport const d = Database;\n`)).length, 1);
  // a type-only import of the Database (to hand it to the store) is fine
  assert.deepEqual(await ruleErrors(rule, 'src/files/zone-probe.ts', `import type { Database } from '../persistence/db.js';\nexport type D = Database;\n`), []);
  assert.deepEqual(await ruleErrors(rule, 'src/files/store.ts', importing('../persistence/sql.js')), []);
});

test('size: a file in src/ over 500 lines, or a function over 150, fails lint (max-lines, max-lines-per-function)', async () => {
  const lint = async (filePath: string, source: string): Promise<string[]> => {
    const [r] = await eslint.lintText(source, { filePath: `${root}/${filePath}` });
    assert.ok(r, 'eslint returned no result');
    return r.messages.filter((m) => m.ruleId === 'max-lines' || m.ruleId === 'max-lines-per-function').map((m) => `${m.ruleId}: ${m.message}`);
  };
  const consts = (n: number): string => Array.from({ length: n }, (_, i) => `export const c${i} = ${i};`).join('\n') + '\n';
  const fn = (n: number): string => `export function f(): number {\n  let x = 0;\n${'  x++;\n'.repeat(n - 4)}  return x;\n}\n`;
  assert.deepEqual(await lint('src/shared/size-probe.ts', consts(500)), [], '500 lines pass');
  assert.match((await lint('src/shared/size-probe.ts', consts(501))).join(), /max-lines: File has too many lines \(501\)/);
  assert.deepEqual(await lint('src/shared/size-probe.ts', fn(150)), [], 'a 150-line function passes');
  assert.match((await lint('src/shared/size-probe.ts', fn(151))).join(), /max-lines-per-function: Function 'f' has too many lines \(151\)/);
  assert.deepEqual(await lint('test/size-probe.ts', consts(600)), [], 'tests are not bound by it');
});
