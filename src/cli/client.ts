/**
 * The client commands of `gantry` (login, whoami, teams, workflows, run, tasks, agents, containers),
 * built on @gantry/sdk. The dk- credential from `gantry login` (device pairing) is kept in
 * $GANTRY_CONFIG_DIR (default $XDG_CONFIG_HOME/gantry or ~/.config/gantry; %APPDATA%\gantry on
 * Windows) in credentials.json, mode 0600.
 *
 * Exit codes (docs/cli.md): 0 done, 1 unexpected failure, 2 usage error, 3 the API refused the
 * request (4xx/5xx other than 401/403), 4 not logged in or not allowed (401/403), 5 the task ended
 * failed or cancelled, 78 refused to start (server commands).
 */
import { chmodSync, createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, hostname } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type ReadableStream as WebReadableStream } from 'node:stream/web';
import { createClient, GantryError, type GantryClient, type TaskEvent } from '@gantry/sdk';
import cliProgress from 'cli-progress';

export const EXIT = { ok: 0, unexpected: 1, usage: 2, api: 3, auth: 4, taskFailed: 5 } as const;

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

// ---- output ----

export interface Out {
  json: boolean;
}

const tty = (): boolean => process.stdout.isTTY === true && !process.env.NO_COLOR && process.env.TERM !== 'dumb';
const paint = (code: string) => (s: string): string => (tty() ? `\x1b[${code}m${s}\x1b[0m` : s);
export const c = { bold: paint('1'), dim: paint('2'), red: paint('31'), green: paint('32'), yellow: paint('33'), cyan: paint('36') };

export const print = (s = ''): void => void process.stdout.write(`${s}\n`);
export const printJson = (v: unknown): void => print(JSON.stringify(v, null, 2));

/** A plain table: one header row, columns padded to their widest cell. */
export function table(rows: Array<Record<string, unknown>>, cols: string[]): void {
  if (rows.length === 0) {
    print(c.dim('(none)'));
    return;
  }
  const cell = (v: unknown): string => (v === null || v === undefined ? '-' : Array.isArray(v) ? v.join(',') : String(v));
  const widths = cols.map((k) => Math.max(k.length, ...rows.map((r) => cell(r[k]).length)));
  print(c.bold(cols.map((k, i) => k.toUpperCase().padEnd(widths[i] as number)).join('  ')).trimEnd());
  for (const r of rows) print(cols.map((k, i) => cell(r[k]).padEnd(widths[i] as number)).join('  ').trimEnd());
}

export const statusColor = (s: string): string => (s === 'completed' || s === 'online' || s === 'running' || s === 'active' ? c.green(s) : s === 'failed' || s === 'cancelled' || s === 'offline' ? c.red(s) : c.yellow(s));

// ---- configuration ----

export interface StoredConfig {
  server: string;
  credential: string;
  team_id: string;
  device_name?: string;
}

export function configDir(): string {
  if (process.env.GANTRY_CONFIG_DIR) return resolve(process.env.GANTRY_CONFIG_DIR);
  if (process.platform === 'win32' && process.env.APPDATA) return join(process.env.APPDATA, 'gantry');
  return join(process.env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'gantry');
}

const configFile = (): string => join(configDir(), 'credentials.json');

export function readConfig(): StoredConfig | null {
  const f = configFile();
  if (!existsSync(f)) return null;
  try {
    return JSON.parse(readFileSync(f, 'utf8')) as StoredConfig;
  } catch {
    throw new CliError(`${f} is not valid JSON: remove it and run gantry login again`, EXIT.usage);
  }
}

function writeConfig(cfg: StoredConfig): string {
  const dir = configDir();
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const f = configFile();
  writeFileSync(f, `${JSON.stringify(cfg, null, 2)}\n`, { mode: 0o600 });
  chmodSync(f, 0o600);
  return f;
}

const DEFAULT_SERVER = 'http://127.0.0.1:8080';

/** `--server` / GANTRY_SERVER / the stored one / the default, as the API base URL (…/api/v1). */
export function apiBase(server: string): string {
  const s = server.replace(/\/+$/, '');
  return s.endsWith('/api/v1') ? s : `${s}/api/v1`;
}

export interface GlobalOpts {
  server?: string;
  json?: boolean;
}

/** The server the last client was made for: errors that could not reach it name it. */
let lastServer: string | null = null;

function serverOf(o: GlobalOpts, cfg: StoredConfig | null): string {
  lastServer = o.server ?? process.env.GANTRY_SERVER ?? cfg?.server ?? DEFAULT_SERVER;
  return lastServer;
}

/** "line L, column C" of a character offset in text (both 1-based). */
export function lineColumn(text: string, offset: number): string {
  const before = text.slice(0, Math.max(0, Math.min(offset, text.length)));
  const line = before.split('\n').length;
  const column = before.length - before.lastIndexOf('\n');
  return `line ${line}, column ${column}`;
}

/** Reads and parses a JSON file; a syntax error names the file, the line and the column. */
export function readJsonFile(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new CliError(`${file}: ${(e as Error).message}`, EXIT.usage);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    const msg = (e as Error).message;
    const at = /at position (\d+)/.exec(msg);
    const offset = at ? Number(at[1]) : text.length;
    const what = msg.replace(/ in JSON at position \d+.*$/s, '').replace(/, ".*" is not valid JSON$/s, '');
    throw new CliError(`${file}: invalid JSON at ${lineColumn(text, offset)}: ${what}`, EXIT.usage);
  }
}

/** A client with the stored dk- (or GANTRY_TOKEN, e.g. an sk- for scripts). */
export function authedClient(o: GlobalOpts): GantryClient {
  const cfg = readConfig();
  const token = process.env.GANTRY_TOKEN ?? cfg?.credential;
  if (!token) throw new CliError('not logged in: run `gantry login` (or set GANTRY_TOKEN)', EXIT.auth);
  return createClient({ baseUrl: apiBase(serverOf(o, cfg)), token, teamId: process.env.GANTRY_TEAM_ID ?? cfg?.team_id ?? null });
}

/** Maps SDK errors to exit codes and messages. */
export function cliErrorOf(e: unknown): CliError | null {
  if (e instanceof CliError) return e;
  if (e instanceof GantryError) {
    const code = e.status === 401 || e.status === 403 ? EXIT.auth : EXIT.api;
    const hint = e.status === 401 ? ' (run `gantry login`)' : '';
    return new CliError(`${e.status} ${e.error_code}: ${e.error_message}${hint}`, code);
  }
  if (e instanceof TypeError && /fetch failed/.test(e.message)) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    const where = lastServer ? `${lastServer.replace(/\/+$/, '')} ` : 'the server ';
    return new CliError(`cannot reach ${where}(${cause?.code ?? cause?.message ?? e.message}): is the node running? --server or GANTRY_SERVER names another one`, EXIT.api);
  }
  return null;
}

// ---- commands ----

export async function login(o: GlobalOpts & { name?: string }): Promise<void> {
  const cfg = readConfig();
  const server = serverOf(o, cfg);
  const gantry = createClient({ baseUrl: apiBase(server) });
  const deviceName = o.name ?? `gantry CLI on ${hostname()}`;
  const pairUrl = `${apiBase(server).replace(/\/api\/v1$/, '')}/pair`;
  const paired = await gantry.pairDevice({
    deviceName,
    // the CLI runs no agent: no ak- that it would throw away (and the user would find in the credentials list)
    agentCredential: false,
    onCode: ({ user_code, expires_in }) => {
      const url = `${pairUrl}?code=${encodeURIComponent(user_code)}`;
      if (o.json) print(JSON.stringify({ user_code, verification_url: url, expires_in }));
      else {
        print(`Your code: ${c.bold(user_code)} (expires in ${Math.round(expires_in / 60)} min)`);
        print(`Open ${c.cyan(url)} and sign in to confirm it.`);
        print(c.dim('No account yet? That page links to Register.'));
        print(c.dim('Waiting for confirmation…'));
      }
    },
  });
  const f = writeConfig({ server, credential: paired.device_credential, team_id: paired.team_id, device_name: deviceName });
  const me = await gantry.me();
  if (o.json) print(JSON.stringify({ logged_in: true, email_address: me.email_address, team_id: paired.team_id, config_file: f }));
  else print(`${c.green('Logged in')} as ${me.email_address} (team ${paired.team_id}); credential stored in ${f}`);
}

export async function logout(o: GlobalOpts): Promise<void> {
  const cfg = readConfig();
  if (!cfg) {
    print('not logged in');
    return;
  }
  try {
    const gantry = createClient({ baseUrl: apiBase(serverOf(o, cfg)), token: cfg.credential });
    await gantry.api.POST('/auth/device/revoke');
  } catch (e) {
    // an already revoked credential is still removed locally
    if (!(e instanceof GantryError && e.status === 401)) throw e;
  } finally {
    rmSync(configFile(), { force: true });
  }
  print('logged out: the device credential is revoked and removed');
}

export async function whoami(o: GlobalOpts): Promise<void> {
  const gantry = authedClient(o);
  const me = await gantry.me();
  const cfg = readConfig();
  if (o.json) return printJson({ ...me, current_team_id: cfg?.team_id ?? null, server: serverOf(o, cfg) });
  print(`${me.display_name} <${me.email_address}>`);
  print(`server ${serverOf(o, cfg)}`);
  const team = me.team_list.find((t) => t.id === cfg?.team_id);
  if (team) print(`team   ${team.display_name} (${team.id})`);
}

export async function workflowsGet(ref: string, o: GlobalOpts): Promise<void> {
  const w = await authedClient(o).getWorkflow(ref).catch((e: unknown) => {
    throw unknownWorkflow(e, ref);
  });
  if (o.json) return printJson(w);
  print(`${c.bold(w.workflow_slug)} v${w.version}  ${w.display_name}`);
  if (w.description) print(w.description);
  print(`tool ${w.tool_type}, dispatch ${w.default_dispatch_target}, status ${w.workflow_status}, id ${w.id}`);
  print(c.bold('parameters'));
  table(w.parameters as Array<Record<string, unknown>>, ['key', 'type', 'required', 'default', 'description']);
}

/** A write's warnings (the write happened), one line each on stderr. */
function warn(ws: ReadonlyArray<{ warning_code: string; warning_message: string }>): void {
  for (const w of ws) process.stderr.write(`warning: ${w.warning_message} (${w.warning_code})\n`);
}

/** push <file>: creates the workflow, or updates it (new version) when its slug exists. */
export async function workflowsPush(file: string, o: GlobalOpts & { note?: string }): Promise<void> {
  const gantry = authedClient(o);
  const def = readJsonFile(file) as Record<string, unknown>;
  const slug = typeof def.workflow_slug === 'string' ? def.workflow_slug : '';
  let existing: { id: string; version: number } | null = null;
  if (slug) {
    try {
      existing = await gantry.getWorkflow(slug);
    } catch (e) {
      if (!(e instanceof GantryError && e.status === 404)) throw e;
    }
  }
  if (existing) {
    const body = { ...def, ...(o.note ? { snapshot_note: o.note } : {}) };
    const { data } = await gantry.api.PUT('/workflows/{workflowId}', { params: { path: { workflowId: existing.id } }, body: body as never });
    const w = await gantry.getWorkflow(existing.id);
    const warnings = data?.warnings ?? [];
    if (o.json) return printJson({ action: 'updated', id: w.id, workflow_slug: w.workflow_slug, version: w.version, ...(warnings.length ? { warnings } : {}) });
    warn(warnings);
    print(`updated ${w.workflow_slug} to v${w.version} (${w.id})`);
  } else {
    const { data } = await gantry.api.POST('/workflows', { body: def as never });
    const warnings = data?.warnings ?? [];
    if (o.json) return printJson({ action: 'created', id: data!.id, workflow_slug: slug, version: 1, ...(warnings.length ? { warnings } : {}) });
    warn(warnings);
    print(`created ${slug} v1 (${data!.id})`);
  }
}

async function exportOne(gantry: GantryClient, ref: string): Promise<Record<string, unknown>> {
  const [slug, v] = ref.split('@');
  const w = await gantry.getWorkflow(slug as string);
  const { data } = await gantry.api.GET('/workflows/{workflowId}/export', { params: { path: { workflowId: w.id }, query: v ? { version: Number(v) } : {} } });
  return data as Record<string, unknown>;
}

/** pull <slug[@v]>: writes the export shape to <slug>.json (or --out FILE, `-` for stdout). */
export async function workflowsPull(ref: string, o: GlobalOpts & { out?: string }): Promise<void> {
  const def = await exportOne(authedClient(o), ref);
  const text = `${JSON.stringify(def, null, 2)}\n`;
  if (o.out === '-') {
    process.stdout.write(text);
    return;
  }
  const f = o.out ?? `${String(def.workflow_slug)}.json`;
  writeFileSync(f, text);
  if (o.json) return printJson({ file: resolve(f), workflow_slug: def.workflow_slug });
  print(`wrote ${f}`);
}

/** export: every workflow of the team into a directory (one <slug>.json each). */
export async function workflowsExport(o: GlobalOpts & { dir?: string }): Promise<void> {
  const gantry = authedClient(o);
  const dir = o.dir ?? '.';
  mkdirSync(dir, { recursive: true });
  const files: string[] = [];
  for (let page = 1; ; page++) {
    const { data } = await gantry.api.GET('/r/workflows', { params: { query: { per_page: 100, current_page: page } } });
    for (const w of data!.workflow_list) {
      const f = join(dir, `${w.workflow_slug}.json`);
      writeFileSync(f, `${JSON.stringify(await exportOne(gantry, w.id), null, 2)}\n`);
      files.push(f);
    }
    if (page * 100 >= data!.page_meta.total_count) break;
  }
  if (o.json) return printJson({ files });
  print(`exported ${files.length} workflow(s) to ${dir}`);
}

/** -p key=value: JSON when it parses (numbers, booleans, objects), the raw string otherwise. */
export function parseParam(kv: string): [string, unknown] {
  const i = kv.indexOf('=');
  if (i <= 0) throw new CliError(`-p ${kv}: expected key=value`, EXIT.usage);
  const raw = kv.slice(i + 1);
  let v: unknown = raw;
  try {
    v = JSON.parse(raw);
  } catch {
    // a plain string
  }
  return [kv.slice(0, i), v];
}

export const pct = (p: number): string => `${Math.round(p * 100)}%`.padStart(4);

/**
 * Follows a task's events: a progress bar on a terminal, one line per event otherwise. Returns the
 * terminal event.
 */
async function follow(gantry: GantryClient, taskId: string, o: GlobalOpts): Promise<TaskEvent | null> {
  const bar = !o.json && process.stdout.isTTY ? new cliProgress.SingleBar({ format: `${c.cyan('{bar}')} {percentage}% | {status} | step {step}/{steps} {node}`, hideCursor: true, clearOnComplete: false, stopOnComplete: false, barsize: 30 }, cliProgress.Presets.shades_classic) : null;
  bar?.start(100, 0, { status: 'pending', step: 0, steps: 0, node: '' });
  let lastEvent: TaskEvent | null = null;
  // the step total seen last: a completed task has done every step, even when the server coalesced
  // the last progress tick into the completion
  let steps = 0;
  try {
    for await (const e of gantry.events(taskId)) {
      lastEvent = e;
      if (o.json) {
        print(JSON.stringify({ event: e.type, id: e.id, data: e.data }));
        continue;
      }
      if (e.type === 'progress') {
        const d = e.data;
        steps = d.step_total;
        if (bar) bar.update(Math.round(d.progress * 100), { status: 'running', step: d.step_current, steps: d.step_total, node: d.current_node ? `(${d.current_node})` : '' });
        else print(`progress ${pct(d.progress)}  step ${d.step_current}/${d.step_total}${d.current_node ? `  ${d.current_node}` : ''}${d.message ? `  ${d.message}` : ''}`);
      } else if (e.type === 'status') {
        if (bar) bar.update({ status: e.data.status });
        else print(`status   ${statusColor(e.data.status)}`);
      } else if (e.type === 'completed') {
        if (bar) bar.update(100, { status: 'completed', ...(steps > 0 ? { step: steps } : {}) });
        else print(`status   ${statusColor('completed')}`);
      } else if (e.type === 'failed' || e.type === 'cancelled') {
        if (bar) bar.update({ status: e.type });
        else print(`status   ${statusColor(e.type)}${e.type === 'failed' ? `: ${e.data.error}` : ''}`);
      } else if (e.type === 'error') {
        if (!bar) print(c.yellow(`warning  ${e.data.message}`));
      }
    }
  } finally {
    bar?.stop();
  }
  return lastEvent;
}

/** Downloads every output of a completed task into dir; returns the files written. */
async function downloadOutputs(gantry: GantryClient, taskId: string, dir: string): Promise<string[]> {
  const r = await gantry.getResult(taskId);
  const urls: Array<[string, string]> = [];
  if (r.download_urls) for (const [k, u] of Object.entries(r.download_urls)) urls.push([k, u]);
  else if (r.download_url) urls.push(['', r.download_url]);
  mkdirSync(dir, { recursive: true });
  const files: string[] = [];
  for (const [k, u] of urls) {
    const fromUrl = basename(new URL(u).pathname) || 'output';
    const name = k && !fromUrl.includes(k) ? `${k}-${fromUrl}` : fromUrl;
    const f = join(dir, name);
    const res = await gantry.download(u);
    await pipeline(Readable.fromWeb(res.body as unknown as WebReadableStream), createWriteStream(f));
    files.push(f);
  }
  return files;
}

/** A 404 for the workflow a command names: the message names the slug (or id) and the server. */
export function unknownWorkflow(e: unknown, ref: string): unknown {
  if (e instanceof GantryError && e.status === 404 && /workflow/.test(e.error_code))
    return new CliError(`404 ${e.error_code}: no workflow "${ref}" in this team on ${lastServer ?? 'the server'}; \`gantry workflows list\` shows the team's workflows`, EXIT.api);
  return e;
}

export async function run(ref: string, o: GlobalOpts & { param?: string[]; file?: string[]; follow?: boolean; outputDir?: string; download?: boolean }): Promise<number> {
  const gantry = authedClient(o);
  const parameters: Record<string, unknown> = {};
  for (const kv of o.param ?? []) {
    const [k, v] = parseParam(kv);
    parameters[k] = v;
  }
  for (const kv of o.file ?? []) {
    const i = kv.indexOf('=');
    if (i <= 0) throw new CliError(`--file ${kv}: expected key=path`, EXIT.usage);
    const path = kv.slice(i + 1);
    let bytes: Buffer;
    try {
      bytes = readFileSync(path);
    } catch (e) {
      throw new CliError(`--file ${kv}: ${(e as Error).message}`, EXIT.usage);
    }
    // on stderr: stdout of `gantry run` without --follow is the task id alone (TASK=$(gantry run ...))
    if (!o.json) process.stderr.write(`${c.dim(`uploading ${path} (${bytes.length} bytes)`)}\n`);
    parameters[kv.slice(0, i)] = await gantry.uploadFile(new Uint8Array(bytes), { fileName: basename(path), contentType: contentTypeOf(path) });
  }
  const { task_id } = await gantry.run(ref, parameters).catch((e: unknown) => {
    throw unknownWorkflow(e, ref);
  });
  if (!o.follow) {
    if (o.json) printJson({ task_id });
    else print(task_id);
    return EXIT.ok;
  }
  if (!o.json) print(`task ${task_id}`);
  const last = await follow(gantry, task_id, o);
  const task = await gantry.getTask(task_id);
  if (task.task_status !== 'completed') {
    if (o.json) printJson({ task_id, task_status: task.task_status, task_error: task.task_error });
    else process.stderr.write(`${c.red(`task ${task.task_status}`)}${task.task_error ? `: ${task.task_error}` : ''}\n`);
    void last;
    return EXIT.taskFailed;
  }
  const files = o.download === false ? [] : await downloadOutputs(gantry, task_id, o.outputDir ?? join('gantry-outputs', task_id));
  if (o.json) printJson({ task_id, task_status: task.task_status, files: files.map((f) => resolve(f)) });
  else for (const f of files) print(`saved ${f}`);
  return EXIT.ok;
}

const TYPES: Record<string, string> = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', webp: 'image/webp', gif: 'image/gif', mp4: 'video/mp4', json: 'application/json', txt: 'text/plain', zip: 'application/zip' };
const contentTypeOf = (p: string): string => TYPES[p.split('.').pop()?.toLowerCase() ?? ''] ?? 'application/octet-stream';

export async function tasksGet(id: string, o: GlobalOpts): Promise<void> {
  const t = await authedClient(o).getTask(id);
  if (o.json) return printJson(t);
  for (const [k, v] of Object.entries(t)) print(`${k.padEnd(16)} ${typeof v === 'object' && v !== null ? JSON.stringify(v) : k === 'task_status' ? statusColor(String(v)) : String(v ?? '-')}`);
}

export async function tasksCancel(id: string, o: GlobalOpts): Promise<void> {
  await authedClient(o).cancel(id);
  if (o.json) return printJson({ task_id: id, is_success: true });
  print(`cancelled ${id}`);
}

export async function tasksTail(id: string, o: GlobalOpts): Promise<number> {
  const gantry = authedClient(o);
  await follow(gantry, id, o);
  const t = await gantry.getTask(id);
  return t.task_status === 'completed' ? EXIT.ok : EXIT.taskFailed;
}

// ---- containers ----

async function serviceIdOf(gantry: GantryClient, ref: string): Promise<string> {
  if (/^[0-9a-f-]{36}$/i.test(ref)) return ref;
  const { data } = await gantry.api.GET('/r/containers/{serviceSlug}', { params: { path: { serviceSlug: ref } } });
  return data!.id;
}

export async function containersGet(ref: string, o: GlobalOpts): Promise<void> {
  const gantry = authedClient(o);
  const { data } = await gantry.api.GET('/containers/{serviceId}', { params: { path: { serviceId: await serviceIdOf(gantry, ref) } } });
  if (o.json) return printJson(data);
  for (const [k, v] of Object.entries(data!)) print(`${k.padEnd(28)} ${typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v ?? '-')}`);
}

export async function containersCreate(file: string, o: GlobalOpts): Promise<void> {
  const body = readJsonFile(file);
  const { data } = await authedClient(o).api.POST('/containers', { body: body as never });
  if (o.json) return printJson(data);
  print(`created ${data!.id}`);
}

export async function containersOp(op: 'deploy' | 'start' | 'stop' | 'undeploy' | 'delete', ref: string, o: GlobalOpts): Promise<void> {
  const gantry = authedClient(o);
  const serviceId = await serviceIdOf(gantry, ref);
  const params = { params: { path: { serviceId } } };
  let out: Record<string, unknown>;
  if (op === 'delete') out = (await gantry.api.DELETE('/containers/{serviceId}', params)).data!;
  else if (op === 'deploy') out = (await gantry.api.POST('/containers/{serviceId}/deploy', params)).data!;
  else if (op === 'start') out = (await gantry.api.POST('/containers/{serviceId}/start', params)).data!;
  else if (op === 'stop') out = (await gantry.api.POST('/containers/{serviceId}/stop', params)).data!;
  else out = (await gantry.api.POST('/containers/{serviceId}/undeploy', params)).data!;
  if (o.json) return printJson(out);
  print(`${op}: ${ref}${typeof out.service_status === 'string' ? ` (${out.service_status})` : ''}`);
}
