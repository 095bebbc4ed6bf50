/**
 * Task outputs: download links for the result record and the retention sweeper.
 *
 * Agents upload outputs under `teams/<team>/outputs/<task>/<attempt>/<name>` through URLs the agent
 * stream presigns; the completed output records storage_key (primary), storage_keys and outputs[]
 * ({name, storage_key, content_type, size}). Only keys under the task's own prefix are ever signed.
 *
 * - agent tasks: download_url = the primary output; download_urls (keyed by output name) too when
 *   the task produced more than one file.
 * - cloud tasks (dispatch_target comfy_cloud): download_urls keyed by output name.
 * URLs live min(7 days, the retention left); after GANTRY_OUTPUT_RETENTION_S past finished_at the
 * result answers 410 and the sweeper deletes the task's output prefix (tasks.output_expires_at).
 */
import type { ObjectStore } from '../storage/port.js';
import { MAX_PRESIGN_EXPIRY_S } from '../storage/port.js';
import type { Logger } from '../shared/logger.js';
import { isTeamKey, outputPrefix } from './keys.js';
import type { FilesStore } from './store.js';

export interface OutputLinksResult {
  download_url: string | null;
  download_urls: Record<string, string> | null;
  expires_at: string | null;
}

export interface TaskOutputsOptions {
  records: FilesStore;
  store: ObjectStore;
  /** GANTRY_OUTPUT_RETENTION_S. */
  retentionS: number;
  now: () => number;
  logger: Logger;
}

const baseName = (k: string): string => k.slice(k.lastIndexOf('/') + 1);

/** The (name -> key) entries of an output record, in order, restricted to the task's prefix. */
export function outputEntries(teamId: string, taskId: string, output: Record<string, unknown>): { primary: string | null; entries: Array<[string, string]> } {
  const prefix = outputPrefix(teamId, taskId);
  const ok = (k: unknown): k is string => isTeamKey(teamId, k) && k.startsWith(prefix);
  const entries: Array<[string, string]> = [];
  const seen = new Set<string>();
  const add = (name: string, key: string): void => {
    if (seen.has(key)) return;
    seen.add(key);
    let n = name || baseName(key);
    for (let i = 2; entries.some(([e]) => e === n); i++) n = `${name || baseName(key)}#${i}`;
    entries.push([n, key]);
  };
  if (Array.isArray(output.outputs)) {
    for (const o of output.outputs as unknown[]) {
      if (o && typeof o === 'object' && ok((o as Record<string, unknown>).storage_key)) {
        const name = (o as Record<string, unknown>).name;
        add(typeof name === 'string' ? name : '', (o as Record<string, string>).storage_key as string);
      }
    }
  }
  if (Array.isArray(output.storage_keys)) for (const k of output.storage_keys as unknown[]) if (ok(k)) add('', k);
  const primary = ok(output.storage_key) ? output.storage_key : (entries[0]?.[1] ?? null);
  if (primary !== null) add('', primary);
  return { primary, entries };
}

export class TaskOutputs {
  constructor(private readonly o: TaskOutputsOptions) {}

  /** The OutputLinks of the result endpoint. */
  async links(teamId: string, taskId: string, output: Record<string, unknown>): Promise<OutputLinksResult> {
    const row = await this.o.records.taskOutputInfo(teamId, taskId);
    const now = this.o.now();
    const finished = row?.finishedAt ?? now;
    const remainingS = Math.floor((finished + this.o.retentionS * 1000 - now) / 1000);
    if (!row || remainingS < 1) return { download_url: null, download_urls: null, expires_at: null };
    const ttl = Math.min(MAX_PRESIGN_EXPIRY_S, remainingS);
    const { primary, entries } = outputEntries(teamId, taskId, output);
    const sign = (k: string): Promise<string> => this.o.store.presignGet(k, { expiresInS: ttl });
    const map = async (): Promise<Record<string, string> | null> => {
      if (entries.length === 0) return null;
      const m: Record<string, string> = {};
      for (const [name, key] of entries) m[name] = await sign(key);
      return m;
    };
    const cloud = row.dispatchTarget === 'comfy_cloud';
    return {
      download_url: !cloud && primary ? await sign(primary) : null,
      download_urls: cloud || entries.length > 1 ? await map() : null,
      expires_at: new Date(now + ttl * 1000).toISOString(),
    };
  }

  /** Deletes the outputs of tasks past retention and marks tasks.output_expires_at. */
  async sweep(limit = 200): Promise<number> {
    const rows = await this.o.records.tasksPastRetention(this.o.now() - this.o.retentionS * 1000, limit);
    let n = 0;
    for (const r of rows) {
      try {
        await this.o.store.deletePrefix(outputPrefix(r.teamId, r.id));
        await this.o.records.markOutputsExpired(r.id, r.finishedAt + this.o.retentionS * 1000);
        n++;
      } catch (e) {
        this.o.logger.warn({ err: e, task_id: r.id }, 'output sweep failed for a task; will retry');
      }
    }
    return n;
  }
}
