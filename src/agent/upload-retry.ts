/**
 * Output uploads that ride out a restart of the node (or object store) behind a presigned URL.
 *
 * Why: the PUT of a finished run's output goes to a URL the node presigned. When that node restarts
 * (a rolling upgrade, a crash) the PUT fails ("fetch failed", a 502/503 from the proxy in front),
 * and failing the attempt for it throws away the whole GPU run: only the task's retry, a new run,
 * covered it (issue 33: 6 of 199 runs of a rolling-upgrade test). The GPU work is done and on disk,
 * so the upload is retried instead, with exponential backoff, until the task's deadline or its abort:
 *  - no HTTP answer (refused, reset, timed out) or a 5xx: the URL may name a node that is gone, so a
 *    fresh one is presigned before the next try (that call itself waits for the agent's stream to
 *    come back; see AgentClient.unary);
 *  - 408 / 429: the same URL again after the backoff;
 *  - 403 (an expired URL, a signature the store no longer accepts): presigned again once, at once;
 *    a second 403 is for good;
 *  - any other 4xx (400, 411, 413: the request itself is wrong): no retry.
 * Retrying is safe: the key is fixed by (task, attempt, name), so a fresh URL names the same object;
 * a store commits a PUT whole or not at all, and `If-None-Match: *` answers 412 when an earlier try
 * did land, which uploadFile counts as done.
 */
import { backoffDelay } from './client.js';
import { TransferError } from './transfer.js';

/** Where one file goes: a presigned PUT and its storage key. */
export interface PutTarget {
  url: string;
  headers: Record<string, string>;
  storageKey: string;
}

export type UploadVerdict = 'retry' | 'represign' | 'represign_once' | 'give_up';

/** What a failed PUT calls for (see the module comment). */
export function uploadVerdict(e: unknown): UploadVerdict {
  const status = e instanceof TransferError ? e.status : null;
  if (status === null) return 'represign';
  if (status >= 500) return 'represign';
  if (status === 408 || status === 429) return 'retry';
  if (status === 403) return 'represign_once';
  return 'give_up';
}

export interface UploadRetryOptions {
  /** The task's deadline (epoch ms): no try starts after it. */
  until: number;
  /** The task's abort (cancel, shutdown): stops a wait or a PUT at once. */
  signal: AbortSignal;
  /** Backoff: first wait ~initialMs, doubling to maxMs (jittered 50-100 %). */
  initialMs?: number;
  maxMs?: number;
  /** Told before each retry (logging). */
  onRetry?: (r: { tries: number; error: unknown; verdict: UploadVerdict; retryInMs: number }) => void;
}

const abortError = (signal: AbortSignal): Error => (signal.reason instanceof Error ? signal.reason : new Error('aborted'));

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(abortError(signal));
    const onAbort = (): void => {
      clearTimeout(t);
      reject(abortError(signal));
    };
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * PUTs one file through `put`, retried as the module comment says; `represign` gets a fresh target
 * for the same file. Resolves with the target that took the file; rejects with the last PUT's error
 * (or the presign's, or the abort's).
 */
export async function putWithRetry(first: PutTarget, put: (t: PutTarget) => Promise<void>, represign: () => Promise<PutTarget>, o: UploadRetryOptions): Promise<PutTarget> {
  const initialMs = o.initialMs ?? 500;
  const maxMs = o.maxMs ?? 15_000;
  let target = first;
  let forbiddenRetried = false;
  for (let tries = 1; ; tries++) {
    if (o.signal.aborted) throw abortError(o.signal);
    try {
      await put(target);
      return target;
    } catch (e) {
      if (o.signal.aborted) throw e;
      const verdict = uploadVerdict(e);
      if (verdict === 'give_up' || (verdict === 'represign_once' && forbiddenRetried)) throw e;
      // an expired URL is not a failing server: a fresh one can go out at once
      const wait = verdict === 'represign_once' ? 0 : backoffDelay(tries - 1, initialMs, maxMs);
      if (Date.now() + wait >= o.until) throw e;
      if (verdict === 'represign_once') forbiddenRetried = true;
      o.onRetry?.({ tries, error: e, verdict, retryInMs: wait });
      if (wait > 0) await sleep(wait, o.signal);
      if (verdict !== 'retry') target = await represign();
    }
  }
}
