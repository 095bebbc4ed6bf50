/**
 * Alerts that work (issue 33 §5), with Debian's `prometheus` package (promtool and prometheus):
 * - `promtool check rules` accepts deploy/observability/prometheus-rules.yaml (its `spec`, a plain
 *   rule file) and `promtool test rules` passes deploy/observability/prometheus-rules.test.yaml,
 *   which has a firing and a silent case for every alert of the file;
 * - a real Prometheus (generated config, own temp dir, free port) scrapes a started node: `up` is 1
 *   and gantry metrics are stored, the rules load and evaluate without error; when the node's
 *   PostgreSQL is cut (a TCP proxy, the shared server is never stopped) its scrapes still succeed
 *   with gantry_database_up 0 and GantryDatabaseUnavailable goes pending; when the node stops, `up`
 *   is 0 and GantryNodeDown goes pending.
 * Skipped, naming the package, when promtool or prometheus is not installed.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { startTestNode } from '../helpers/node.js';
import { adminUrl, createTestDatabase } from '../helpers/pg.js';
import { PgProxy } from '../helpers/pg-proxy.js';

const root = new URL('../../', import.meta.url).pathname;
const RULES = join(root, 'deploy/observability/prometheus-rules.yaml');
const UNIT = join(root, 'deploy/observability/prometheus-rules.test.yaml');
const has = (bin: string): boolean => spawnSync(bin, ['--version'], { encoding: 'utf8' }).status === 0;
const SKIP = has('promtool') && has('prometheus') ? false : 'promtool/prometheus not installed (Debian package prometheus)';

interface Rule {
  record?: string;
  alert?: string;
  expr: string;
}
const spec = (): { groups: Array<{ name: string; rules: Rule[] }> } => (parse(readFileSync(RULES, 'utf8')) as { spec: { groups: Array<{ name: string; rules: Rule[] }> } }).spec;

/** A temp dir holding the rules as a plain rule file (gantry-rules.yaml, the name the unit test reads). */
function rulesDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-prom-'));
  writeFileSync(join(dir, 'gantry-rules.yaml'), stringify(spec()));
  return dir;
}

test('promtool check rules accepts prometheus-rules.yaml, and it alerts on queue age, agent loss, webhook backlog, node down and database unavailable', { skip: SKIP }, () => {
  const dir = rulesDir();
  try {
    const r = spawnSync('promtool', ['check', 'rules', join(dir, 'gantry-rules.yaml')], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    const count = spec().groups.reduce((n, g) => n + g.rules.length, 0);
    assert.match(r.stdout, new RegExp(`SUCCESS: ${count} rules found`), r.stdout);
    const alerts = spec().groups.flatMap((g) => g.rules.filter((x) => x.alert).map((x) => x.alert));
    for (const a of ['GantryTasksWaitingTooLong', 'GantryAgentsLost', 'GantryNoAgentOnline', 'GantryWebhookBacklog', 'GantryNodeDown', 'GantryDatabaseUnavailable']) assert.ok(alerts.includes(a), `alert ${a}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('promtool test rules passes prometheus-rules.test.yaml, which fires and silences every alert of the file', { skip: SKIP }, () => {
  const unit = parse(readFileSync(UNIT, 'utf8')) as { rule_files: string[]; tests: Array<{ alert_rule_test?: Array<{ alertname: string; exp_alerts: unknown[] }> }> };
  assert.deepEqual(unit.rule_files, ['gantry-rules.yaml']);
  const cases = unit.tests.flatMap((t) => t.alert_rule_test ?? []);
  for (const g of spec().groups)
    for (const r of g.rules.filter((x) => x.alert)) {
      assert.ok(cases.some((c) => c.alertname === r.alert && c.exp_alerts.length > 0), `a case where ${r.alert} fires`);
      assert.ok(cases.some((c) => c.alertname === r.alert && c.exp_alerts.length === 0), `a case where ${r.alert} does not fire`);
    }
  const dir = rulesDir();
  try {
    copyFileSync(UNIT, join(dir, 'prometheus-rules.test.yaml'));
    const r = spawnSync('promtool', ['test', 'rules', 'prometheus-rules.test.yaml'], { cwd: dir, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /SUCCESS/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const a = s.address();
  await new Promise<void>((resolve) => s.close(() => resolve()));
  if (!a || typeof a !== 'object') throw new Error('no port');
  return a.port;
}

/** Polls `probe` every 200 ms until it returns a value (not undefined), for at most `ms`. */
async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`${what}: not reached in ${ms} ms${last ? ` (${String(last)})` : ''}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('a real Prometheus scrapes a started node, evaluates the rules, and sees the database outage and the node going down', { skip: SKIP }, async () => {
  const db = await createTestDatabase('prom');
  const admin = new URL(adminUrl());
  const proxy = new PgProxy(admin.hostname, Number(admin.port || 5432));
  await proxy.start();
  const url = new URL(db.url);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  const t = await startTestNode({ DATABASE_URL: url.toString(), GANTRY_METRICS_CACHE_MS: 0 }, 'prom-node');
  let nodeStopped = false;
  const dir = rulesDir();
  let prom: ChildProcess | null = null;
  let promLog = '';
  try {
    const port = await freePort();
    const target = new URL(t.origin).host;
    writeFileSync(
      join(dir, 'prometheus.yml'),
      stringify({
        global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
        rule_files: [join(dir, 'gantry-rules.yaml')],
        scrape_configs: [{ job_name: 'gantry', metrics_path: '/metrics', static_configs: [{ targets: [target] }] }],
      }),
    );
    const check = spawnSync('promtool', ['check', 'config', join(dir, 'prometheus.yml')], { encoding: 'utf8' });
    assert.equal(check.status, 0, check.stdout + check.stderr);
    prom = spawn('prometheus', [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'pipe', 'pipe'] });
    prom.stdout?.on('data', (d: Buffer) => (promLog += String(d)));
    prom.stderr?.on('data', (d: Buffer) => (promLog += String(d)));
    const exited = new Promise<never>((_, reject) => prom?.once('exit', (code) => reject(new Error(`prometheus exited (${code}): ${promLog}`))));
    const api = `http://127.0.0.1:${port}`;
    const query = async (q: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>> => {
      const r = await fetch(`${api}/api/v1/query?query=${encodeURIComponent(q)}`);
      const body = (await r.json()) as { status: string; data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> } };
      assert.equal(body.status, 'success', JSON.stringify(body));
      return body.data.result;
    };
    const nonEmpty = async (q: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }> | undefined> => {
      const r = await query(q);
      return r.length > 0 ? r : undefined;
    };
    const alertState = async (name: string): Promise<string | undefined> => {
      const r = (await (await fetch(`${api}/api/v1/alerts`)).json()) as { data: { alerts: Array<{ labels: Record<string, string>; state: string }> } };
      return r.data.alerts.find((a) => a.labels.alertname === name)?.state;
    };
    const wait = <T>(what: string, probe: () => Promise<T | undefined>): Promise<T> => Promise.race([until(what, 30_000, probe), exited]);

    await wait('prometheus ready', async () => ((await fetch(`${api}/-/ready`).catch(() => null))?.ok ? true : undefined));
    // the node is scraped: its target is up and gantry series are stored with the job's labels
    const up = await wait('up{job="gantry"} == 1', () => nonEmpty('up{job="gantry"} == 1'));
    assert.equal(up[0]?.metric.instance, target);
    const dbUp = await wait('gantry_database_up', () => nonEmpty('gantry_database_up{job="gantry"}'));
    assert.equal(dbUp[0]?.value[1], '1');
    assert.ok((await wait('gantry_agent_streams', () => nonEmpty('gantry_agent_streams{job="gantry"}'))).length === 1);
    assert.ok((await wait('gantry_webhook_backlog', () => nonEmpty('gantry_webhook_backlog{job="gantry"}'))).length === 1);
    // every rule group has been evaluated, and no rule errs on the live series
    const rules = await wait('rule groups evaluated', async () => {
      const r = (await (await fetch(`${api}/api/v1/rules`)).json()) as { data: { groups: Array<{ name: string; lastEvaluation: string; rules: Array<{ name: string; health: string; lastError?: string }> }> } };
      return r.data.groups.length === spec().groups.length && r.data.groups.every((g) => !g.lastEvaluation.startsWith('0001')) ? r.data.groups : undefined;
    });
    for (const g of rules) for (const r of g.rules) assert.equal(r.health, 'ok', `${g.name}/${r.name}: ${r.lastError ?? ''}`);
    assert.equal(await alertState('GantryDatabaseUnavailable'), undefined);
    assert.equal(await alertState('GantryNodeDown'), undefined);

    // PostgreSQL unreachable from the node: /metrics still answers, with gantry_database_up 0
    await proxy.cut();
    await wait('gantry_database_up == 0', () => nonEmpty('gantry_database_up{job="gantry"} == 0'));
    assert.equal((await query('up{job="gantry"}'))[0]?.value[1], '1', 'the scrape itself still succeeds');
    await wait('GantryDatabaseUnavailable pending', async () => ((await alertState('GantryDatabaseUnavailable')) === 'pending' ? true : undefined));
    await proxy.start();
    await wait('gantry_database_up back to 1', () => nonEmpty('gantry_database_up{job="gantry"} == 1'));

    // the node stops: its target is down and the node-down alert is pending
    await t.node.close();
    nodeStopped = true;
    await wait('up{job="gantry"} == 0', () => nonEmpty('up{job="gantry"} == 0'));
    await wait('GantryNodeDown pending', async () => ((await alertState('GantryNodeDown')) === 'pending' ? true : undefined));
  } finally {
    if (prom && prom.exitCode === null) {
      const gone = new Promise((resolve) => prom?.once('exit', resolve));
      prom.kill('SIGTERM');
      await gone;
    }
    if (!nodeStopped) await t.node.close().catch(() => undefined);
    await proxy.stop();
    await t.db.drop();
    await db.drop();
    rmSync(t.dataDir, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});
