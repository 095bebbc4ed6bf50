/**
 * The port behind which a hosted compute provider sits. Comfy Cloud (comfy-cloud.ts) is the one
 * implementation; another ComfyUI-compatible host (or another API) plugs in as another
 * CloudProviderClient and a slug in CLOUD_PROVIDER_SLUGS.
 */
import type { Readable } from 'node:stream';
import type { ComfyFileRef, ProgressTick } from '../protocol/comfyui.js';

export const CLOUD_PROVIDER_SLUGS = ['comfy_cloud'] as const;
export type CloudProviderSlug = (typeof CLOUD_PROVIDER_SLUGS)[number];
export const DEFAULT_BASE_URLS: Record<CloudProviderSlug, string> = { comfy_cloud: 'https://cloud.comfy.org' };
export const PROVIDER_NAMES: Record<CloudProviderSlug, string> = { comfy_cloud: 'Comfy Cloud' };

/**
 * Why the provider refused or failed, in the words a user acts on:
 * auth (bad or revoked key), credits (no credits left), subscription (the account cannot run jobs:
 * subscription inactive or not paid, or waitlisted), invalid (the workflow or an input: unknown node
 * type, bad value, an upload over the limits), busy (the provider's queue or concurrency limit is
 * full: try later), unavailable (5xx, network, timeout: try later), not_found (the job is gone).
 */
export type ProviderErrorKind = 'auth' | 'credits' | 'subscription' | 'invalid' | 'busy' | 'unavailable' | 'not_found';

export class ProviderError extends Error {
  constructor(
    readonly kind: ProviderErrorKind,
    message: string,
    readonly status = 0,
  ) {
    super(message);
    this.name = 'ProviderError';
  }
  /** Worth trying the same request again later. */
  get transient(): boolean {
    return this.kind === 'busy' || this.kind === 'unavailable';
  }
}

/** How a provider job ended. */
export type JobOutcome = { kind: 'completed'; outputs: ComfyFileRef[] } | { kind: 'failed'; error: string } | { kind: 'cancelled'; message: string };

export interface FollowHandlers {
  /** The provider reports execution (first time only). */
  onStarted(): void;
  onProgress(p: ProgressTick): void;
  /** Transient trouble while following (socket lost, a poll failed): logged, never fatal. */
  onTrouble(what: string): void;
}

export interface CloudProviderClient {
  /** One authenticated call: null when the key works, else the provider's reason. */
  check(signal?: AbortSignal): Promise<ProviderError | null>;
  /** Uploads an input file; returns the value for a LoadImage-style input. */
  upload(bytes: Buffer, fileName: string, signal?: AbortSignal): Promise<string>;
  /**
   * Queues the API-format graph under the prompt_id we chose (so a retry after an unknown outcome can
   * look it up first); returns the provider's job id (the chosen one unless the provider assigned
   * another). Throws ProviderError.
   */
  submit(graph: Record<string, unknown>, promptId: string, signal?: AbortSignal): Promise<string>;
  /** Whether the provider has a job with this id (false only on a definite "not found"). */
  jobExists(promptId: string, signal?: AbortSignal): Promise<boolean>;
  /** Follows the job until it ends (WebSocket for progress, job status polling as the authority). */
  follow(promptId: string, graph: Record<string, { class_type: string }>, h: FollowHandlers, signal: AbortSignal): Promise<JobOutcome>;
  /** Fetches one output (the provider may redirect to a signed URL on another host: the key never goes there). */
  download(ref: ComfyFileRef, signal?: AbortSignal): Promise<{ body: Readable; contentType: string | null; size: number | null }>;
  /** Cancels this one job (queued or running), never any other job of the account. */
  cancel(promptId: string): Promise<void>;
  close(): void;
}
