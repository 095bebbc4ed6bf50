/**
 * A finished prompt's outputs as task outputs (comfyui.ts): saved files downloaded through
 * GET /view into <workDir>/outputs, text results written there as .txt files.
 */
import { createWriteStream } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { ExecutorError, type ExecContext, type ExecOutput } from './types.js';
import { contentTypeFor } from './util.js';
import type { ComfyClient } from './comfyui-client.js';
import { viewQuery, type ComfyFileRef } from '../../protocol/comfyui.js';

export const sanitize = (s: string): string => s.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 120);

/** Text results become .txt outputs (`<node>_text.txt`, numbered when a node has several). */
export async function writeTexts(texts: Array<{ node: string; text: string }>, ctx: ExecContext, used: Set<string>): Promise<ExecOutput[]> {
  if (texts.length === 0) return [];
  const dir = path.join(ctx.workDir, 'outputs');
  await mkdir(dir, { recursive: true });
  const out: ExecOutput[] = [];
  for (const t of texts) {
    const stem = `${sanitize(t.node)}_text`;
    let name = `${stem}.txt`;
    for (let i = 2; used.has(name); i++) name = `${stem}_${i}.txt`;
    used.add(name);
    const localPath = path.join(dir, name);
    const bytes = Buffer.from(t.text, 'utf8');
    await writeFile(localPath, bytes);
    out.push({ name, localPath, contentType: 'text/plain', size: bytes.length });
  }
  return out;
}

/** Downloads the files through GET /view, each under its base name (numbered when names repeat). */
export async function downloadOutputs(client: ComfyClient, refs: ComfyFileRef[], ctx: ExecContext): Promise<ExecOutput[]> {
  const dir = path.join(ctx.workDir, 'outputs');
  await mkdir(dir, { recursive: true });
  const used = new Set<string>();
  const outputs: ExecOutput[] = [];
  for (const ref of refs) {
    let name = path.basename(ref.filename);
    if (used.has(name)) {
      const ext = path.extname(name);
      let i = 1;
      while (used.has(`${name.slice(0, name.length - ext.length)}_${i}${ext}`)) i++;
      name = `${name.slice(0, name.length - ext.length)}_${i}${ext}`;
    }
    used.add(name);
    const res = await client.http(`/view?${viewQuery(ref)}`, { timeoutMs: client.o.transferTimeoutMs, signal: ctx.signal });
    if (!res.ok || !res.body) {
      throw new ExecutorError('tool_error', `ComfyUI /view ${ref.type}/${ref.subfolder ? `${ref.subfolder}/` : ''}${ref.filename} returned ${res.status}`);
    }
    const localPath = path.join(dir, name);
    let size = 0;
    const body = Readable.fromWeb(res.body as unknown as NodeReadableStream<Uint8Array>);
    body.on('data', (c: Buffer) => (size += c.length));
    try {
      await pipeline(body, createWriteStream(localPath));
    } catch (err) {
      await rm(localPath, { force: true });
      if (ctx.signal.aborted) throw new ExecutorError('cancelled', 'task cancelled');
      throw new ExecutorError('tool_error', `downloading ${ref.filename} from ComfyUI failed: ${(err as Error).message}`, { cause: err });
    }
    const headerType = res.headers.get('content-type')?.split(';')[0]?.trim();
    const contentType = headerType && headerType !== 'application/octet-stream' ? headerType : contentTypeFor(name);
    outputs.push({ name, localPath, contentType, size });
  }
  return outputs;
}
