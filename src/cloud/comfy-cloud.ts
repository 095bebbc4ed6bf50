/**
 * Comfy Cloud (https://cloud.comfy.org): ComfyUI's API under /api, authenticated by an X-API-Key
 * header (the WebSocket by a token query parameter). What Gantry relies on (docs/api.md "Cloud
 * providers"), each from github.com/Comfy-Org/docs:
 *
 *   GET  /api/user                         the key check at PUT /cloud-providers: {status: active|waitlisted}
 *                                          (openapi-cloud.yaml UserResponse), 401 bad key, 429 subscription inactive
 *   POST /api/upload/image                 multipart image, type=input -> {name, subfolder, type}; 400 over 50 MB,
 *                                          16384 px per edge or 64 MP (openapi-cloud.yaml uploadImage)
 *   POST /api/prompt {prompt, prompt_id, extra_data: {api_key_comfy_org}}
 *                                          -> {prompt_id}; 400 invalid workflow (node_errors), 401 bad key,
 *                                          402 insufficient credits, 429 subscription inactive / not paid, 5xx
 *                                          (openapi-cloud.yaml executePrompt; the key for partner nodes in
 *                                          extra_data: development/cloud/api-reference.mdx "Using Partner Nodes")
 *   GET  /ws?clientId=&token=              ComfyUI's messages (execution_start, executing, progress,
 *                                          executed, execution_success/error/interrupted) for every job of the key
 *                                          (api-reference.mdx "WebSocket for Real-Time Progress": clientId ignored)
 *   GET  /api/jobs/{id}                    {status: pending|in_progress|completed|failed|cancelled, outputs,
 *                                          execution_error}: the authority on how a job ended (polled), and the
 *                                          look-up before a submission is retried (openapi-cloud.yaml getJobDetail)
 *   GET  /api/view?filename&subfolder&type 302 to a signed URL on another host: followed WITHOUT the key
 *                                          (openapi-cloud.yaml viewFile, snippets/cloud/download-outputs.mdx)
 *   POST /api/v2/jobs/{id}/cancel          `Authorization: Bearer <key>`: cancels THAT job (openapi-v2.yaml cancelJob);
 *   POST /api/queue {delete: [id]}         only when v2 does not know the id: removes it if still pending
 *                                          (openapi-cloud.yaml manageQueue). Never POST /api/interrupt: it cancels
 *                                          every running job of the account (openapi-cloud.yaml interruptJob).
 *   (GET /api/history_v2 is deprecated in openapi-cloud.yaml and not used.)
 *
 * Every connection goes through the OutboundGuard (base_url must pass it; TLS verified, extra CAs
 * from GANTRY_OUTBOUND_CA_FILE). The key is sent only to base_url's origin and is never part of
 * an error message or a log line (the WebSocket URL carrying it is never printed).
 */
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import WebSocket from 'ws';
import type { OutboundGuard } from '../events/outbound.js';
import { ExternalError, externalRequest } from '../gateway/external.js';
import {
  collectOutputs,
  executionErrorMessage,
  parseWsFrame,
  ProgressTracker,
  promptPayload,
  promptRejection,
  readPromptMessage,
  viewQuery,
  type ComfyFileRef,
  type ComfyWsMessage,
} from '../protocol/comfyui.js';
import { ProviderError, type CloudProviderClient, type FollowHandlers, type JobOutcome } from './provider.js';
import { isRecord } from '../shared/is-record.js';

export interface ComfyCloudOptions {
  baseUrl: string;
  apiKey: string;
  guard: OutboundGuard;
  ca?: string[] | undefined;
  /** Per request, until the response headers. Default 30 s. */
  timeoutMs?: number;
  /** Job status poll interval while following. Default 2 s. */
  pollMs?: number;
  /** WebSocket handshake timeout. Default 10 s. */
  wsConnectTimeoutMs?: number;
}

const NAME = 'Comfy Cloud';
const MAX_JSON = 16 * 1024 * 1024;

async function readAll(body: NodeJS.ReadableStream, limit = MAX_JSON): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of body as AsyncIterable<Buffer | string>) {
    const b = typeof c === 'string' ? Buffer.from(c) : c;
    n += b.length;
    if (n > limit) throw new ProviderError('unavailable', `${NAME} answered more than ${limit} bytes`);
    chunks.push(b);
  }
  return Buffer.concat(chunks);
}

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

/** A provider answer's reason in one line (never the request, never the key). */
function reasonOf(text: string): string {
  try {
    const j = JSON.parse(text) as unknown;
    if (isRecord(j)) {
      const e = j.error;
      if (isRecord(e) && typeof e.message === 'string') return e.message;
      if (typeof e === 'string') return e;
      if (typeof j.message === 'string') return j.message;
      if (typeof j.detail === 'string') return j.detail;
    }
  } catch {
    /* plain text */
  }
  return text.replace(/\s+/g, ' ').trim().slice(0, 300);
}

/** Maps a non-2xx provider status to what the user can do about it. */
export function providerErrorFor(status: number, what: string, reason: string): ProviderError {
  const r = reason ? `: ${reason}` : '';
  if (status === 401 || status === 403) return new ProviderError('auth', `${NAME} rejected the API key (${status}${r}); set a valid key with PUT /cloud-providers/comfy_cloud`, status);
  if (status === 402) return new ProviderError('credits', `cloud_provider_unavailable: ${NAME} has no credits left for this account (402${r}); top up at platform.comfy.org, then run the task again`, status);
  // 429 is not a rate limit on Comfy Cloud's /api: "Subscription inactive" (development/cloud/overview.mdx
  // "Error Handling"; openapi-cloud.yaml executePrompt 429 "Payment required - User has not paid")
  if (status === 429) return new ProviderError('subscription', `cloud_provider_unavailable: ${NAME} refused the job because this account's subscription is inactive or not paid (429${r}); renew the subscription at comfy.org, then run the task again`, status);
  if (status === 404) return new ProviderError('not_found', `${NAME} ${what} answered 404${r}`, status);
  if (status >= 400 && status < 500) return new ProviderError('invalid', `${NAME} rejected the workflow (${status}${r})`, status);
  return new ProviderError('unavailable', `${NAME} ${what} answered ${status}${r}`, status);
}

export class ComfyCloudClient implements CloudProviderClient {
  private readonly base: string;
  private readonly timeoutMs: number;
  private readonly pollMs: number;
  private readonly wsConnectTimeoutMs: number;
  private readonly sockets = new Set<WebSocket>();

  constructor(private readonly o: ComfyCloudOptions) {
    this.base = o.baseUrl.replace(/\/+$/, '');
    this.timeoutMs = o.timeoutMs ?? 30_000;
    this.pollMs = o.pollMs ?? 2_000;
    this.wsConnectTimeoutMs = o.wsConnectTimeoutMs ?? 10_000;
  }

  close(): void {
    for (const ws of this.sockets) ws.terminate();
    this.sockets.clear();
  }

  private async request(method: string, path: string, o: { body?: Buffer; headers?: Record<string, string>; signal?: AbortSignal | undefined; bearer?: boolean } = {}) {
    try {
      return await externalRequest(this.o.guard, {
        baseUrl: this.base,
        path,
        method,
        headers: { accept: 'application/json', ...(o.headers ?? {}) },
        body: o.body ?? null,
        // the v2 API authenticates by `Authorization: Bearer <api-key>` (openapi-v2.yaml bearerAuth)
        inject: o.bearer ? { name: 'Authorization', value: `Bearer ${this.o.apiKey}` } : { name: 'X-API-Key', value: this.o.apiKey },
        timeoutMs: this.timeoutMs,
        ...(this.o.ca ? { ca: this.o.ca } : {}),
        ...(o.signal ? { signal: o.signal } : {}),
      });
    } catch (e) {
      if (e instanceof ExternalError) {
        if (e.code === 'aborted') throw e;
        if (e.code === 'refused') throw new ProviderError('unavailable', `${NAME} at ${this.base} is not reachable from this deployment: ${e.message}`);
        throw new ProviderError('unavailable', `${NAME} ${path.split('?')[0]} failed: ${e.code === 'timeout' ? `no answer within ${this.timeoutMs} ms` : e.message}`);
      }
      throw e;
    }
  }

  private async json(method: string, path: string, what: string, o: { body?: unknown; signal?: AbortSignal | undefined; bearer?: boolean } = {}): Promise<unknown> {
    const res = await this.request(method, path, {
      ...(o.body !== undefined ? { body: Buffer.from(JSON.stringify(o.body)), headers: { 'content-type': 'application/json' } } : {}),
      signal: o.signal,
      ...(o.bearer ? { bearer: true } : {}),
    });
    const text = (await readAll(res.body)).toString('utf8');
    if (res.status < 200 || res.status >= 300) throw providerErrorFor(res.status, what, reasonOf(text));
    try {
      return text ? (JSON.parse(text) as unknown) : {};
    } catch {
      throw new ProviderError('unavailable', `${NAME} ${what} answered invalid JSON`);
    }
  }

  async check(signal?: AbortSignal): Promise<ProviderError | null> {
    try {
      const u = await this.json('GET', '/api/user', 'GET /api/user', { signal });
      // UserResponse.status: "User status (active or waitlisted)" (openapi-cloud.yaml); a 2xx alone is not enough
      const status = isRecord(u) && typeof u.status === 'string' ? u.status : '';
      if (status === 'waitlisted') return new ProviderError('subscription', `${NAME} accepted the key, but its account is waitlisted (GET /api/user status "waitlisted"): API access needs an active account with a Standard, Creator or Pro subscription`);
      if (status !== 'active') return new ProviderError('subscription', `${NAME} accepted the key, but its account is not active (GET /api/user status ${JSON.stringify(status.slice(0, 40))})`);
      return null;
    } catch (e) {
      if (e instanceof ProviderError) return e;
      throw e;
    }
  }

  async upload(bytes: Buffer, fileName: string, signal?: AbortSignal): Promise<string> {
    const form = new FormData();
    form.append('image', new Blob([new Uint8Array(bytes)]), fileName);
    form.append('type', 'input');
    form.append('overwrite', 'true');
    const req = new Request('http://form.invalid/', { method: 'POST', body: form });
    const body = Buffer.from(await req.arrayBuffer());
    const res = await this.request('POST', '/api/upload/image', { body, headers: { 'content-type': req.headers.get('content-type') ?? '' }, signal });
    const text = (await readAll(res.body)).toString('utf8');
    // 400: "Uploads that exceed any of these limits are rejected with HTTP 400" (openapi-cloud.yaml uploadImage)
    if (res.status === 400) throw new ProviderError('invalid', `${NAME} refused the input file ${fileName} (400: ${reasonOf(text)})`, 400);
    if (res.status < 200 || res.status >= 300) throw providerErrorFor(res.status, 'POST /api/upload/image', reasonOf(text));
    let j: unknown;
    try {
      j = JSON.parse(text);
    } catch {
      j = null;
    }
    if (!isRecord(j) || typeof j.name !== 'string') throw new ProviderError('unavailable', `${NAME} /api/upload/image returned no file name`);
    const sub = typeof j.subfolder === 'string' ? j.subfolder : '';
    return sub ? `${sub}/${j.name}` : j.name;
  }

  async submit(graph: Record<string, unknown>, promptId: string, signal?: AbortSignal): Promise<string> {
    // prompt_id chosen by us (ComfyUI's POST /prompt honours it; Comfy Cloud implements the same interface,
    // openapi-cloud.yaml info "Cloud vs OSS ComfyUI Compatibility"): a retry after an unknown outcome looks
    // the job up by this id first. extra_data.api_key_comfy_org: the key partner (API) nodes bill to
    // (development/cloud/api-reference.mdx "Using Partner Nodes"; overview.mdx "the same key is used for Partner Nodes").
    const payload = promptPayload(graph, promptId, { comfyOrgApiKey: this.o.apiKey });
    const res = await this.request('POST', '/api/prompt', { body: Buffer.from(JSON.stringify(payload)), headers: { 'content-type': 'application/json' }, signal });
    const text = (await readAll(res.body)).toString('utf8');
    let body: unknown = null;
    try {
      body = JSON.parse(text);
    } catch {
      /* below */
    }
    if (res.status === 400) throw new ProviderError('invalid', `${NAME} rejected the workflow: ${promptRejection(body, text).message}`, 400);
    if (res.status < 200 || res.status >= 300) throw providerErrorFor(res.status, 'POST /api/prompt', isRecord(body) ? promptRejection(body, text).message : reasonOf(text));
    if (isRecord(body) && isRecord(body.error)) throw new ProviderError('invalid', `${NAME} rejected the workflow: ${promptRejection(body, text).message}`, res.status);
    if (!isRecord(body) || typeof body.prompt_id !== 'string' || body.prompt_id === '') throw new ProviderError('unavailable', `${NAME} /api/prompt returned no prompt_id`);
    return body.prompt_id;
  }

  /**
   * Whether the provider has the job (a submission whose answer was lost may have created it):
   * GET /api/jobs/{id} 2xx = yes, 404 = no (openapi-cloud.yaml getJobDetail); anything else throws.
   */
  async jobExists(promptId: string, signal?: AbortSignal): Promise<boolean> {
    try {
      await this.jobStatus(promptId, signal);
      return true;
    } catch (e) {
      if (e instanceof ProviderError && e.kind === 'not_found') return false;
      throw e;
    }
  }

  /** GET /api/jobs/{id} as {status, outputs, error} (openapi-cloud.yaml JobDetailResponse; outputs once terminal). */
  async jobStatus(promptId: string, signal?: AbortSignal): Promise<{ status: string; outputs: unknown; error: Record<string, unknown> | null }> {
    const j = await this.json('GET', `/api/jobs/${encodeURIComponent(promptId)}`, `GET /api/jobs/${promptId}`, { signal });
    if (!isRecord(j) || typeof j.status !== 'string') throw new ProviderError('unavailable', `${NAME} /api/jobs/${promptId} answered without a status`);
    return { status: j.status, outputs: j.outputs, error: isRecord(j.execution_error) ? j.execution_error : null };
  }

  private connectWs(onMessage: (msg: ComfyWsMessage) => void, onClose: (why: string) => void): Promise<WebSocket> {
    const url = `${this.base.replace(/^http/, 'ws')}/ws?clientId=${randomUUID()}&token=${encodeURIComponent(this.o.apiKey)}`;
    return this.o.guard.checkUrl(url, ['wss:']).then(
      () =>
        new Promise<WebSocket>((resolve, reject) => {
          const ws = new WebSocket(url, { handshakeTimeout: this.wsConnectTimeoutMs, lookup: this.o.guard.lookup as never, ...(this.o.ca ? { ca: this.o.ca } : {}) });
          let opened = false;
          ws.on('open', () => {
            opened = true;
            this.sockets.add(ws);
            resolve(ws);
          });
          ws.on('unexpected-response', (_req, res) => {
            // the handshake was refused (e.g. 401): the status, never the URL (it carries the key)
            ws.terminate();
            if (!opened) reject(new ProviderError(res.statusCode === 401 || res.statusCode === 403 ? 'auth' : 'unavailable', `${NAME} WebSocket refused (${res.statusCode ?? 0})`));
          });
          ws.on('message', (data, isBinary) => {
            const msg = parseWsFrame(data, isBinary); // null: a preview frame, or not JSON
            if (msg) onMessage(msg);
          });
          ws.on('error', (err) => {
            if (!opened) reject(new ProviderError('unavailable', `${NAME} WebSocket: ${err.message.replace(/token=[^&\s]*/g, 'token=***')}`));
          });
          ws.on('close', (code) => {
            this.sockets.delete(ws);
            if (opened) onClose(`WebSocket closed (${code})`);
          });
        }),
    );
  }

  async follow(promptId: string, graph: Record<string, { class_type: string }>, h: FollowHandlers, signal: AbortSignal): Promise<JobOutcome> {
    let started = false;
    const start = (): void => {
      if (started) return;
      started = true;
      h.onStarted();
    };
    const tracker = new ProgressTracker(graph, (p) => h.onProgress(p));
    let wsOutcome: JobOutcome | 'success' | null = null;
    let wake: (() => void) | null = null;
    const poke = (): void => {
      const w = wake;
      wake = null;
      w?.();
    };
    let ws: WebSocket | null = null;
    let wsLost = false;
    // the socket's word on the job (the shared event switch); the job status stays the authority
    const onMessage = (msg: ComfyWsMessage): void => {
      const ev = readPromptMessage(msg, promptId, tracker);
      if (ev === null) return;
      switch (ev.kind) {
        case 'step':
          if (ev.started) start();
          break;
        case 'idle':
          start();
          break;
        case 'success':
          wsOutcome = 'success';
          poke();
          break;
        case 'error':
          wsOutcome = { kind: 'failed', error: executionErrorMessage(ev.data, NAME) };
          poke();
          break;
        case 'interrupted':
          wsOutcome = { kind: 'cancelled', message: `${NAME} interrupted the job at node ${String(ev.data.node_id)}` };
          poke();
          break;
        case 'other':
          break;
      }
    };
    const openWs = async (): Promise<void> => {
      try {
        ws = await this.connectWs(onMessage, (why) => {
          wsLost = true;
          h.onTrouble(`${why}; following the job by polling /api/jobs`);
          poke();
        });
        wsLost = false;
      } catch (e) {
        wsLost = true;
        h.onTrouble(`${(e as Error).message}; following the job by polling /api/jobs`);
      }
    };
    await openWs();
    let failures = 0;
    let nextWsTry = Date.now() + 10 * this.pollMs;
    try {
      for (;;) {
        if (signal.aborted) return { kind: 'cancelled', message: 'task cancelled' };
        // the job status is the authority (a message missed while the socket was down is not lost)
        let st: Awaited<ReturnType<ComfyCloudClient['jobStatus']>> | null = null;
        try {
          st = await this.jobStatus(promptId, signal);
          failures = 0;
        } catch (e) {
          if (signal.aborted) return { kind: 'cancelled', message: 'task cancelled' };
          failures++;
          if (e instanceof ProviderError && (e.kind === 'auth' || e.kind === 'subscription')) return { kind: 'failed', error: e.message };
          if (e instanceof ProviderError && e.kind === 'not_found' && failures >= 5) return { kind: 'failed', error: `${NAME} no longer knows job ${promptId} (404)` };
          h.onTrouble(`job status poll failed (${failures}): ${(e as Error).message}`);
        }
        const wo = wsOutcome as JobOutcome | 'success' | null;
        if (st) {
          if (st.status === 'in_progress' || st.status === 'executing' || st.status === 'running') start();
          if (st.status === 'completed' || st.status === 'success') return this.completed(st.outputs, tracker, start);
          if (st.status === 'failed' || st.status === 'error' || st.status === 'non_retryable_error' || st.status === 'lost') {
            if (st.error) return { kind: 'failed', error: executionErrorMessage(st.error, NAME) };
            if (wo !== null && wo !== 'success' && wo.kind === 'failed') return wo;
            return { kind: 'failed', error: `${NAME} reported job ${promptId} as ${st.status}` };
          }
          if (st.status === 'cancelled') return { kind: 'cancelled', message: `${NAME} cancelled job ${promptId}` };
        } else if (wo === 'success') {
          // the status endpoint is down but the socket said it finished: outputs from the executed messages
          if (collectOutputs(tracker.executedOutputs).files.length > 0) return this.completed(tracker.executedOutputs, tracker, start);
        }
        if (wsLost && !signal.aborted && Date.now() >= nextWsTry) {
          nextWsTry = Date.now() + 10 * this.pollMs;
          await openWs();
        }
        // poll sooner when the socket reported an end; back off while the provider fails
        const wait = wo ? Math.min(200, this.pollMs) : Math.min(this.pollMs * 2 ** Math.min(failures, 4), 30_000);
        if (wait > 0)
          await new Promise<void>((resolve) => {
            wake = resolve;
            void sleep(wait, signal).then(resolve);
          });
        wake = null;
      }
    } finally {
      (ws as WebSocket | null)?.close();
    }
  }

  /**
   * The job's saved files from GET /api/jobs (its `outputs` once terminal), else what the `executed`
   * messages reported: every output kind (images, gifs, audio, video, 3d, path-valued 3D results),
   * never a temp preview (collectOutputs, as the agent's executor).
   */
  private completed(outputs: unknown, tracker: ProgressTracker, start: () => void): JobOutcome {
    start();
    let refs = collectOutputs(outputs).files;
    if (refs.length === 0) refs = collectOutputs(tracker.executedOutputs).files;
    return { kind: 'completed', outputs: refs };
  }

  async download(ref: ComfyFileRef, signal?: AbortSignal): Promise<{ body: Readable; contentType: string | null; size: number | null }> {
    // externalRequest follows the 302 to the signed URL and sends X-API-Key to base_url's origin only
    const res = await this.request('GET', `/api/view?${viewQuery(ref)}`, { signal, headers: { accept: '*/*' } });
    if (res.status < 200 || res.status >= 300) {
      const text = (await readAll(res.body, 64 * 1024).catch(() => Buffer.alloc(0))).toString('utf8');
      throw providerErrorFor(res.status, `GET /api/view ${ref.filename}`, reasonOf(text));
    }
    const ct = res.headers['content-type'];
    const len = res.headers['content-length'];
    return { body: res.body as Readable, contentType: typeof ct === 'string' ? ct.split(';')[0]!.trim() : null, size: typeof len === 'string' && /^\d+$/.test(len) ? Number(len) : null };
  }

  /**
   * Cancels this one job: POST /api/v2/jobs/{id}/cancel with `Authorization: Bearer <key>`
   * (openapi-v2.yaml cancelJob: running -> canceling -> canceled, idempotent, a finished job answers
   * its terminal state). Its {id} is our prompt_id: openapi-cloud.yaml says "the prompt_id returned
   * by /api/prompt is the same value as job_id" (getHistoryForPrompt), and the v2 JobId is that same
   * job UUID. When v2 answers 404 (it does not know the id) or refuses the bearer key, the job is
   * removed from the queue if it is still pending (POST /api/queue {delete}: "only affects pending
   * jobs"); a running job then goes on at the provider (the error is reported). Never POST
   * /api/interrupt: "Cancel all currently RUNNING jobs for the authenticated user" (interruptJob).
   */
  async cancel(promptId: string): Promise<void> {
    try {
      await this.json('POST', `/api/v2/jobs/${encodeURIComponent(promptId)}/cancel`, `POST /api/v2/jobs/${promptId}/cancel`, { bearer: true });
    } catch (e) {
      if (!(e instanceof ProviderError) || (e.kind !== 'not_found' && e.kind !== 'auth')) throw e;
      const q = await this.json('POST', '/api/queue', 'POST /api/queue', { body: { delete: [promptId] } });
      // QueueManageResponse.deleted: the pending job is gone; else it may still run: say why it was not cancelled
      if (isRecord(q) && Array.isArray(q.deleted) && q.deleted.includes(promptId)) return;
      throw new ProviderError(e.kind, `${NAME} could not cancel job ${promptId}: ${e.message}`, e.status);
    }
  }
}
