// deploy/: the Dockerfile, the compose stack and the Helm chart. Checks that always run (and can
// fail): non-root image with a health check, every variable the files set is a real configuration
// variable, the probed paths are real routes, no secret shipped. Then the tools' own validation when
// they are installed: `docker compose config` (or docker-compose), `helm lint` and `helm template`.
// deploy/observability: the dashboard parses, every metric its queries and the KEDA/Prometheus
// examples name is exported by a live node.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { configSchema } from '../../src/shared/config.js';
import { systemRoutes } from '../../src/edge/routes/system.js';
import { AGENT_FLAGS } from '../../src/agent/main.js';
import { startTestNode } from '../helpers/node.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const read = (p: string): string => readFileSync(join(root, p), 'utf8');
const CONFIG_VARS = new Set(Object.keys(configSchema.shape));
/** Set by the platform, not by Gantry's configuration. */
const PLATFORM_VARS = new Set(['POD_IP', 'POD_NAME', 'NODE_ENV']);
const probePaths = new Set(systemRoutes({ config: {} as never, ready: async () => ({ ready: true, checks: {} }) }).map((r) => r.path));

test('Dockerfile: Node 20 slim (glibc), a non-root numeric user, a health check without curl, exec-form entrypoint, the three ports', () => {
  const d = read('Dockerfile');
  assert.match(d, /^ARG BASE_IMAGE=node:20-slim$/m);
  const froms = [...d.matchAll(/^FROM (\S+)/gm)].map((m) => m[1]);
  assert.ok(froms.length >= 2 && froms.every((f) => f === '${BASE_IMAGE}'), `every stage starts from the base image argument (got ${froms.join(', ')})`);
  const user = /^USER\s+(\S+)/m.exec(d)?.[1] ?? '';
  assert.match(user, /^[1-9]\d*(:[1-9]\d*)?$/, `USER is a non-root numeric uid (got ${user})`);
  assert.match(d, /^HEALTHCHECK .*\/healthz/ms);
  assert.doesNotMatch(d, /curl|wget/, 'the slim image has no curl: the health check uses node');
  assert.match(d, /^ENTRYPOINT \["node", "bin\/gantry\.mjs"\]/m, 'exec form: SIGTERM reaches node');
  for (const p of ['8080', '50051', '50061']) assert.match(d, new RegExp(`^EXPOSE .*\\b${p}\\b`, 'm'));
  for (const [, name] of d.matchAll(/^\s*(?:ENV\s+)?(GANTRY_[A-Z0-9_]+)=/gm)) assert.ok(CONFIG_VARS.has(name as string), `Dockerfile sets ${name}, a configuration variable`);
  assert.ok(probePaths.has('/healthz'));
});

test('compose: PostgreSQL, Redis, three nodes and a load balancer; every variable is a configuration variable; no secret shipped', () => {
  const c = parse(read('deploy/compose/docker-compose.yml'), { merge: true }) as { services: Record<string, { environment?: Record<string, string>; healthcheck?: { test: string[] }; depends_on?: Record<string, unknown> }> };
  const nodes = Object.entries(c.services).filter(([, s]) => s.environment?.REDIS_URL);
  assert.equal(nodes.length, 3, 'three Gantry nodes');
  assert.ok(c.services.postgres && c.services.redis && c.services.lb);
  const ids = new Set<string>();
  for (const [name, s] of nodes) {
    for (const k of Object.keys(s.environment ?? {})) assert.ok(CONFIG_VARS.has(k) || PLATFORM_VARS.has(k), `${name}: ${k} is a configuration variable`);
    ids.add(String(s.environment?.GANTRY_NODE_ID));
    assert.match(String(s.environment?.GANTRY_CLUSTER_ADVERTISE), /^node\d:50061$/);
    assert.equal(s.environment?.GANTRY_SECRET_KEY, '${GANTRY_SECRET_KEY}', `${name}: the secret comes from .env`);
    const hc = (s.healthcheck?.test ?? []).join(' ');
    const path = /127\.0\.0\.1:8080(\/[a-z]+)/.exec(hc)?.[1];
    assert.ok(path && probePaths.has(path), `${name}: its health check probes a real route (${path})`);
  }
  assert.equal(ids.size, 3, 'distinct node ids');
  const env = read('deploy/compose/.env.example');
  assert.match(env, /^GANTRY_SECRET_KEY=$/m, 'the example ships no secret');
  const lb = read('deploy/compose/nginx.conf');
  assert.match(lb, /proxy_http_version 1\.1;/, 'HTTP/1.1 to the nodes');
  assert.match(lb, /proxy_buffering off;/, 'SSE unbuffered');
  assert.match(lb, /stream \{[\s\S]*50051/, 'agent streams as TCP');
});

test('helm chart: probes on real routes, a PDB, config from a Secret, non-root, every variable a configuration variable', () => {
  const dir = 'deploy/helm/gantry';
  const values = parse(read(`${dir}/values.yaml`)) as { env: Record<string, string>; secret: Record<string, string>; podSecurityContext: { runAsNonRoot: boolean; runAsUser: number }; terminationGracePeriodSeconds: number };
  for (const k of [...Object.keys(values.env), ...Object.keys(values.secret)]) assert.ok(CONFIG_VARS.has(k), `values: ${k} is a configuration variable`);
  for (const v of Object.values(values.secret)) assert.equal(v, '', 'the chart ships no secret value');
  assert.equal(values.podSecurityContext.runAsNonRoot, true);
  assert.ok(values.podSecurityContext.runAsUser > 0);
  assert.ok(values.terminationGracePeriodSeconds * 1000 > Number(values.env.GANTRY_SHUTDOWN_TIMEOUT_MS), 'the grace period outlasts the graceful stop');
  const dep = read(`${dir}/templates/deployment.yaml`);
  for (const [, name] of dep.matchAll(/- name: ([A-Z][A-Z0-9_]+)\n/g)) assert.ok(CONFIG_VARS.has(name as string) || PLATFORM_VARS.has(name as string), `deployment sets ${name}, a configuration variable`);
  for (const [, path] of dep.matchAll(/path: (\/[a-z]+)/g)) assert.ok(probePaths.has(path as string), `probe path ${path} is a route`);
  assert.match(dep, /readinessProbe:[\s\S]*\/readyz/);
  assert.match(dep, /livenessProbe:[\s\S]*\/healthz/);
  assert.match(dep, /secretRef:/);
  assert.match(dep, /readOnlyRootFilesystem|securityContext/);
  const templates = readdirSync(join(root, dir, 'templates'));
  for (const t of ['pdb.yaml', 'service.yaml', 'secret.yaml', '_helpers.tpl', 'NOTES.txt']) assert.ok(templates.includes(t), `templates/${t}`);
  assert.match(read(`${dir}/templates/pdb.yaml`), /kind: PodDisruptionBudget/);
});

const has = (cmd: string, args: string[]): boolean => spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;

test('docker compose config validates the compose file', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-compose-'));
  try {
    const envFile = join(dir, '.env');
    writeFileSync(envFile, read('deploy/compose/.env.example').replace(/^GANTRY_SECRET_KEY=$/m, `GANTRY_SECRET_KEY=${'x'.repeat(40)}`));
    const file = join(root, 'deploy/compose/docker-compose.yml');
    let r;
    if (has('docker', ['compose', 'version'])) r = spawnSync('docker', ['compose', '--env-file', envFile, '-f', file, 'config', '-q'], { encoding: 'utf8' });
    else if (has('docker-compose', ['version'])) r = spawnSync('docker-compose', ['--env-file', envFile, '-f', file, 'config', '-q'], { encoding: 'utf8' });
    else return t.skip('docker compose (or docker-compose) not installed');
    assert.equal(r.status, 0, `compose config: ${r.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('helm lint and helm template render the chart', (t) => {
  if (!has('helm', ['version'])) return t.skip('helm not installed');
  const chart = join(root, 'deploy/helm/gantry');
  const set = ['--set', 'secret.DATABASE_URL=postgres://x', '--set', 'secret.REDIS_URL=redis://x', '--set', `secret.GANTRY_SECRET_KEY=${'x'.repeat(40)}`];
  const lint = spawnSync('helm', ['lint', chart, ...set], { encoding: 'utf8' });
  assert.equal(lint.status, 0, lint.stdout + lint.stderr);
  const tpl = spawnSync('helm', ['template', 'g', chart, ...set], { encoding: 'utf8' });
  assert.equal(tpl.status, 0, tpl.stderr);
  assert.match(tpl.stdout, /kind: Deployment/);
  assert.match(tpl.stdout, /kind: PodDisruptionBudget/);
});

test('observability: the Grafana dashboard parses, and every metric the dashboard, the KEDA ScaledObject and the Prometheus rules query is one a live node exports', async () => {
  const dashboard = JSON.parse(read('deploy/observability/grafana-dashboard.json')) as { uid: string; panels: Array<{ title: string; targets?: Array<{ expr: string }> }>; templating: { list: Array<{ query?: unknown }> } };
  assert.ok(dashboard.uid && dashboard.panels.length >= 10, 'a dashboard with panels');
  const exprs: Array<[where: string, expr: string]> = [];
  for (const p of dashboard.panels) for (const t of p.targets ?? []) exprs.push([`dashboard "${p.title}"`, t.expr]);
  for (const v of dashboard.templating.list) if (typeof v.query === 'string' && v.query.includes('gantry_')) exprs.push(['dashboard variable', v.query]);
  const keda = parse(read('deploy/observability/keda-scaledobject.yaml')) as { kind: string; spec: { scaleTargetRef: { name: string }; triggers: Array<{ type: string; metadata: { query: string } }> } };
  assert.equal(keda.kind, 'ScaledObject');
  for (const tr of keda.spec.triggers) exprs.push(['KEDA trigger', tr.metadata.query]);
  const rules = parse(read('deploy/observability/prometheus-rules.yaml')) as { kind: string; spec: { groups: Array<{ rules: Array<{ record?: string; alert?: string; expr: string }> }> } };
  assert.equal(rules.kind, 'PrometheusRule');
  for (const g of rules.spec.groups) for (const r of g.rules) exprs.push([`rule ${r.record ?? r.alert}`, r.expr]);
  assert.ok(exprs.length >= 25, 'queries found');

  // the KEDA target is the example agent pool, whose flags and variables are the agent's own
  const pool = parse(read('deploy/observability/agent-gpu-pool.yaml')) as { kind: string; metadata: { name: string }; spec: { template: { spec: { containers: Array<{ name: string; args?: string[]; env?: Array<{ name: string }> }> } } } };
  assert.equal(pool.kind, 'Deployment');
  assert.equal(keda.spec.scaleTargetRef.name, pool.metadata.name);
  const agentC = pool.spec.template.spec.containers.find((c) => c.name === 'agent');
  assert.ok(agentC?.args?.[0] === 'agent');
  const flags = new Set(AGENT_FLAGS.map((r) => `--${r[0]}`));
  const envs = new Set(AGENT_FLAGS.map((r) => r[1] as string));
  for (const a of agentC.args.slice(1)) if (a.startsWith('--')) assert.ok(flags.has(a), `agent flag ${a}`);
  for (const e of agentC.env ?? []) assert.ok(envs.has(e.name), `agent variable ${e.name}`);
  const poolLabels = agentC.args[agentC.args.indexOf('--labels') + 1];
  for (const tr of keda.spec.triggers.filter((x) => x.metadata.query.includes('gantry_queue_depth'))) assert.ok(tr.metadata.query.includes(`required_labels="${poolLabels}"`), 'KEDA reads the queue of the pool\'s label set');

  // the names a live node exports (# TYPE lines: families without samples yet are listed too)
  const t = await startTestNode({}, 'deploy-metrics');
  let exported: Set<string>;
  try {
    const text = await (await fetch(`${t.origin}/metrics`)).text();
    exported = new Set<string>();
    for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      exported.add(name as string);
      if (type === 'histogram') for (const sfx of ['_bucket', '_sum', '_count']) exported.add(`${name}${sfx}`);
      if (type === 'summary') for (const sfx of ['_sum', '_count']) exported.add(`${name}${sfx}`);
    }
  } finally {
    await t.stop();
  }
  const queried = new Set<string>();
  for (const [where, expr] of exprs)
    for (const [name] of expr.matchAll(/\bgantry_[a-z0-9_]+\b/g)) {
      queried.add(name);
      assert.ok(exported.has(name), `${where} queries ${name}, which /metrics does not export`);
    }
  for (const m of ['gantry_queue_depth', 'gantry_queue_oldest_waiting_seconds', 'gantry_tasks', 'gantry_agents', 'gantry_scheduler_queue_wait_seconds_bucket', 'gantry_sse_streams', 'gantry_webhook_backlog', 'gantry_proxy_requests_total'])
    assert.ok(queried.has(m), `something queries ${m}`);
});
