import { stat } from 'node:fs/promises';
import path from 'node:path';
import { ExecutorError, type ExecOutput } from './types.js';
import { isRecord } from '../../shared/is-record.js';

export const cancelledError = (what = 'task cancelled'): ExecutorError => new ExecutorError('cancelled', what);

/** Resolves after `ms`, rejects with ExecutorError('cancelled') as soon as `signal` aborts. */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(cancelledError());
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(cancelledError());
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, Math.max(0, ms));
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** A promise that rejects with ExecutorError('cancelled') when the signal aborts (never resolves). */
export function abortPromise(signal: AbortSignal): { promise: Promise<never>; dispose(): void } {
  let onAbort: (() => void) | undefined;
  const promise = new Promise<never>((_, reject) => {
    if (signal.aborted) {
      reject(cancelledError());
      return;
    }
    onAbort = () => reject(cancelledError());
    signal.addEventListener('abort', onAbort, { once: true });
  });
  promise.catch(() => undefined);
  return {
    promise,
    dispose: () => {
      if (onAbort) signal.removeEventListener('abort', onAbort);
    },
  };
}

export { isRecord };

/**
 * Reads a per-task override: parameters first, then the workflow's top level, then any graph
 * node's `inputs` (ComfyUI API graph shape: { "<id>": { class_type, inputs } }).
 */
export function readOverride(key: string, parameters: Record<string, unknown>, workflow: unknown): unknown {
  if (Object.prototype.hasOwnProperty.call(parameters, key)) return parameters[key];
  if (!isRecord(workflow)) return undefined;
  if (Object.prototype.hasOwnProperty.call(workflow, key) && !isRecord(workflow[key])) return workflow[key];
  for (const node of Object.values(workflow)) {
    if (isRecord(node) && isRecord(node.inputs) && Object.prototype.hasOwnProperty.call(node.inputs, key)) {
      return node.inputs[key];
    }
  }
  return undefined;
}

export function toNumber(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v);
  return undefined;
}

export function toBool(v: unknown): boolean {
  if (typeof v === 'boolean') return v;
  if (typeof v === 'number') return v !== 0;
  if (typeof v === 'string') return ['1', 'true', 'yes', 'on'].includes(v.trim().toLowerCase());
  return false;
}

const MIME: Record<string, string> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
  '.gif': 'image/gif',
  '.bmp': 'image/bmp',
  '.tif': 'image/tiff',
  '.tiff': 'image/tiff',
  '.mp4': 'video/mp4',
  '.webm': 'video/webm',
  '.mov': 'video/quicktime',
  '.mkv': 'video/x-matroska',
  '.avi': 'video/x-msvideo',
  '.wav': 'audio/wav',
  '.mp3': 'audio/mpeg',
  '.flac': 'audio/flac',
  '.json': 'application/json',
  '.txt': 'text/plain',
  '.yml': 'application/yaml',
  '.yaml': 'application/yaml',
  '.ply': 'application/octet-stream',
  '.splat': 'application/octet-stream',
  '.obj': 'model/obj',
  '.glb': 'model/gltf-binary',
  '.gltf': 'model/gltf+json',
  '.zip': 'application/zip',
};

export function contentTypeFor(fileName: string): string {
  return MIME[path.extname(fileName).toLowerCase()] ?? 'application/octet-stream';
}

export async function describeOutput(localPath: string, name = path.basename(localPath), contentType?: string): Promise<ExecOutput> {
  const st = await stat(localPath);
  return { name, localPath, contentType: contentType ?? contentTypeFor(name), size: st.size };
}

export const clamp01 = (x: number): number => (Number.isFinite(x) ? Math.max(0, Math.min(1, x)) : 0);

/** Keeps only the last `maxBytes` of a growing text stream. */
export class TailBuffer {
  private buf = '';
  constructor(private readonly maxChars = 8192) {}
  push(s: string): void {
    this.buf += s;
    if (this.buf.length > this.maxChars * 2) this.buf = this.buf.slice(-this.maxChars);
  }
  lines(n: number): string {
    const text = this.buf.slice(-this.maxChars).replace(/\s+$/, '');
    return text.split(/\r?\n/).slice(-n).join('\n');
  }
}
