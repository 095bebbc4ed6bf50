/**
 * Runs hosted-provider jobs for the cloud dispatchers (the actors' CloudJobsPort): for one task,
 * submit its resolved graph (file parameters uploaded to the provider first) or re-attach to the
 * job the provider already accepted (cloud_jobs.prompt_id), follow it, and copy its outputs into
 * Gantry's object store under the task's output prefix, so the result carries download_urls with
 * the usual retention. Every ending is a CloudJobResult; provider failures become messages a user
 * can act on (bad key, no credits, invalid workflow / unknown node type, timeout, outage).
 */
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { CloudJobCallbacks, CloudJobResult, CloudJobsPort, TaskStorePort } from '../actors/ports.js';
import type { ObjectStore } from '../storage/port.js';
import { outputPrefix, sanitizeFileName } from '../files/keys.js';
import { toApiGraph } from '../protocol/comfyui.js';
import type { Logger } from '../shared/logger.js';
import { cloudUploadProblem, imageDimensions } from './limits.js';
import { ProviderError, PROVIDER_NAMES, type CloudProviderClient, type CloudProviderSlug } from './provider.js';
import type { CloudCredentials, CloudProviderStore } from './store.js';

export interface CloudRunnerOptions {
  store: CloudProviderStore;
  tasks: TaskStorePort;
  objects: ObjectStore;
  /** A client for the provider with the team's key. */
  client: (provider: CloudProviderSlug, c: CloudCredentials) => CloudProviderClient;
  logger: Logger;
  /** How long a busy/unavailable provider holds new submissions (default 5 s). */
  busyRetryMs?: number;
  /** Transient submission failures in a row before the task fails (default 3). */
  maxSubmitFailures?: number;
}

const CONTENT_TYPES: Record<string, string> = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', webp: 'image/webp', gif: 'image/gif', mp4: 'video/mp4', webm: 'video/webm', wav: 'audio/wav', mp3: 'audio/mpeg', flac: 'audio/flac', glb: 'model/gltf-binary', json: 'application/json', txt: 'text/plain' };
const contentTypeOf = (name: string): string => CONTENT_TYPES[name.slice(name.lastIndexOf('.') + 1).toLowerCase()] ?? 'application/octet-stream';

async function buffer(body: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of body as AsyncIterable<Buffer | string>) chunks.push(typeof c === 'string' ? Buffer.from(c) : c);
  return Buffer.concat(chunks);
}

export class CloudRunner implements CloudJobsPort {
  /** Transient submission failures in a row, per task (a task fails after maxSubmitFailures). */
  private readonly submitFailures = new Map<string, number>();
  /** Node shutdown: every job stops being followed here (the provider's jobs go on; the next start re-attaches). */
  private readonly closing = new AbortController();

  constructor(private readonly o: CloudRunnerOptions) {}

  /** Stops following every job (before the actor system shuts down, which waits for in-flight I/O). */
  stop(): void {
    this.closing.abort();
  }

  private slug(provider: string): CloudProviderSlug {
    if (provider !== 'comfy_cloud') throw new Error(`unknown cloud provider ${provider}`);
    return provider;
  }

  async capacity(teamId: string, provider: string): Promise<number | null> {
    const c = await this.o.store.credentials(teamId, provider).catch(() => null);
    return c ? c.maxConcurrentJobs : null;
  }

  async cancel(teamId: string, provider: string, taskId: string): Promise<void> {
    const promptId = await this.o.store.jobOf(teamId, taskId);
    if (!promptId) return;
    const creds = await this.o.store.credentials(teamId, provider);
    if (!creds) return;
    const client = this.o.client(this.slug(provider), creds);
    try {
      await client.cancel(promptId);
      this.o.logger.info({ task_id: taskId, team_id: teamId, provider, prompt_id: promptId }, 'cloud: provider job cancelled');
    } finally {
      client.close();
    }
  }

  async run(job: { teamId: string; provider: string; taskId: string; attempt: number; epoch: number | null }, cb: CloudJobCallbacks, jobSignal: AbortSignal): Promise<CloudJobResult> {
    const signal = AbortSignal.any([jobSignal, this.closing.signal]);
    if (signal.aborted) return { kind: 'stopped' };
    const log = this.o.logger.child({ task_id: job.taskId, team_id: job.teamId, provider: job.provider });
    const name = PROVIDER_NAMES[this.slug(job.provider)];
    let creds: CloudCredentials | null;
    try {
      creds = await this.o.store.credentials(job.teamId, job.provider);
    } catch (e) {
      return { kind: 'later', reason: `reading the provider key failed: ${(e as Error).message}`, retryInMs: this.o.busyRetryMs ?? 5_000 };
    }
    if (!creds) return { kind: 'failed', error: `${name} is not configured for this team: set its API key with PUT /cloud-providers/${job.provider}` };
    const client = this.o.client(this.slug(job.provider), creds);
    try {
      const a = await this.o.tasks.assignment(job.taskId);
      if (!a) return { kind: 'stopped' };
      const g = toApiGraph(a.workflow);
      if (!g.ok) return { kind: 'failed', error: g.error };
      const graph = g.graph;
      const sub = await this.o.store.submissionOf(job.teamId, job.taskId);
      let promptId: string;
      if (sub?.accepted) {
        promptId = sub.promptId;
        log.info({ prompt_id: promptId }, 'cloud: re-attaching to the provider job');
      } else {
        // file parameters: read and checked against the provider's upload limits before any provider call
        const inputs: Array<{ nodeId: string; field: string; name: string; bytes: Buffer }> = [];
        for (const f of a.inputFiles) {
          if (f.nodeId === undefined || f.field === undefined) continue;
          if (!graph[f.nodeId]) return { kind: 'failed', error: `file parameter "${f.key}" targets node ${f.nodeId}, which is not in the workflow` };
          const bytes = await buffer(await this.o.objects.get(f.fileKey));
          const problem = cloudUploadProblem(`bad_input: file parameter "${f.key}" (${f.fileName || f.fileKey})`, bytes.length, imageDimensions(bytes));
          if (problem) return { kind: 'failed', error: problem };
          inputs.push({ nodeId: f.nodeId, field: f.field, name: `${job.taskId.replace(/-/g, '').slice(0, 12)}_${sanitizeFileName(f.fileName || f.key)}`, bytes });
        }
        try {
          // an earlier try of this attempt may have created the job although its answer was lost
          // (timeout, 5xx): look the id up before submitting again, so a retry never makes a second job
          if (sub && (await client.jobExists(sub.promptId, signal))) {
            promptId = sub.promptId;
            log.info({ prompt_id: promptId }, 'cloud: the earlier submission had created the job; following it');
          } else {
            const chosen = sub?.promptId ?? randomUUID();
            if (!sub) await this.o.store.recordSubmission(job.taskId, job.teamId, job.provider, chosen);
            for (const f of inputs) graph[f.nodeId]!.inputs[f.field] = await client.upload(f.bytes, f.name, signal);
            promptId = await client.submit(graph, chosen, signal);
          }
        } catch (e) {
          if (signal.aborted) return { kind: 'stopped' };
          return this.submitFailed(job, e, log);
        }
        this.submitFailures.delete(job.taskId);
        await this.o.store.recordJob(job.taskId, job.teamId, job.provider, promptId);
        await this.o.store.markWorking(job.teamId, job.provider).catch(() => undefined);
        log.info({ prompt_id: promptId }, 'cloud: provider accepted the job');
      }
      const epoch = await cb.accepted(promptId);
      if (epoch === null) {
        // cancelled while it was being submitted: the provider's job is not wanted
        await client.cancel(promptId).catch(() => undefined);
        return { kind: 'stopped' };
      }
      const outcome = await client.follow(promptId, graph, { onStarted: () => cb.started(), onProgress: (p) => cb.progress(p), onTrouble: (w) => cb.trouble(w) }, signal);
      if (signal.aborted) return { kind: 'stopped' };
      if (outcome.kind === 'failed') {
        if (/rejected the API key/.test(outcome.error)) await this.o.store.markStatus(job.teamId, job.provider, 'invalid', outcome.error).catch(() => undefined);
        if (/subscription is inactive/.test(outcome.error)) await this.o.store.markStatus(job.teamId, job.provider, 'subscription_inactive', outcome.error).catch(() => undefined);
        return { kind: 'failed', error: outcome.error };
      }
      if (outcome.kind === 'cancelled') return { kind: 'failed', error: outcome.message };
      cb.progress({ progress: 0.99, step_current: 0, step_total: 0, current_node: `copying ${outcome.outputs.length} output(s)` });
      const prefix = `${outputPrefix(job.teamId, job.taskId)}${a.attempt}/`;
      const outputs: Array<{ name: string; storage_key: string; content_type: string; size: number }> = [];
      const used = new Set<string>();
      for (const ref of outcome.outputs) {
        let fileName = sanitizeFileName(ref.filename);
        for (let i = 2; used.has(fileName); i++) fileName = `${i}_${sanitizeFileName(ref.filename)}`;
        used.add(fileName);
        const dl = await client.download(ref, signal);
        const bytes = await buffer(dl.body);
        const contentType = dl.contentType && dl.contentType !== 'application/octet-stream' ? dl.contentType : contentTypeOf(fileName);
        const key = `${prefix}${fileName}`;
        await this.o.objects.put(key, Readable.from(bytes), { contentLength: bytes.length, contentType });
        outputs.push({ name: ref.filename, storage_key: key, content_type: contentType, size: bytes.length });
      }
      log.info({ prompt_id: promptId, outputs: outputs.length }, 'cloud: job completed, outputs copied');
      return {
        kind: 'completed',
        output: {
          ...(outputs[0] ? { storage_key: outputs[0].storage_key } : {}),
          storage_keys: outputs.map((o) => o.storage_key),
          image_count: outputs.filter((o) => o.content_type.startsWith('image/')).length,
          outputs,
          provider: job.provider,
          provider_job_id: promptId,
        },
      };
    } catch (e) {
      if (signal.aborted) return { kind: 'stopped' };
      if (e instanceof ProviderError && e.transient) return { kind: 'failed', error: `${e.message} (while fetching the job's outputs)` };
      return { kind: 'failed', error: e instanceof ProviderError ? e.message : `${name} job failed: ${(e as Error).message}` };
    } finally {
      client.close();
    }
  }

  private async submitFailed(job: { teamId: string; provider: string; taskId: string }, e: unknown, log: Logger): Promise<CloudJobResult> {
    if (e instanceof ProviderError) {
      if (e.kind === 'auth') await this.o.store.markStatus(job.teamId, job.provider, 'invalid', e.message).catch(() => undefined);
      // 429 on Comfy Cloud: the subscription is inactive or not paid; retrying cannot help, the task fails now
      if (e.kind === 'subscription') await this.o.store.markStatus(job.teamId, job.provider, 'subscription_inactive', e.message).catch(() => undefined);
      if (e.transient) {
        const n = (this.submitFailures.get(job.taskId) ?? 0) + 1;
        const max = this.o.maxSubmitFailures ?? 3;
        log.warn({ failures: n, status: e.status, reason: e.message }, 'cloud: provider did not take the job');
        if (e.kind === 'busy' || n < max) {
          if (e.kind !== 'busy') this.submitFailures.set(job.taskId, n);
          return { kind: 'later', reason: e.message, retryInMs: (this.o.busyRetryMs ?? 5_000) * Math.min(n, 6) };
        }
        this.submitFailures.delete(job.taskId);
        return { kind: 'failed', error: `${e.message} (${n} attempts)` };
      }
      this.submitFailures.delete(job.taskId);
      return { kind: 'failed', error: e.message };
    }
    this.submitFailures.delete(job.taskId);
    return { kind: 'failed', error: `submitting to the provider failed: ${(e as Error).message}` };
  }
}
