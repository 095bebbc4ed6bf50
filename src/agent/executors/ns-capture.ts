/** The nerfstudio executor's capture: fetched or found by data.source, unpacked, and laid out for ns-process-data. */
import { createWriteStream } from 'node:fs';
import { copyFile, mkdir, readdir, stat, symlink } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { NerfstudioSpec as SpecShape } from '../../domain/workflows/nerfstudio.js';
import { ExecutorError, type ExecContext } from './types.js';
import { cancelledError } from './util.js';
import { redactText } from './ns-files.js';

const VIDEO_EXT = new Set(['.mp4', '.mov', '.avi', '.mkv', '.webm', '.m4v', '.mpg', '.mpeg']);
const IMAGE_EXT = new Set(['.jpg', '.jpeg', '.png', '.tif', '.tiff', '.cr2']);

/** The capture as a local file or directory, by data.source. */
export async function acquireCapture(ctx: ExecContext, work: string, spec: SpecShape, redact: string[]): Promise<string> {
  const d = spec.data;
  if (d.source === 'path') {
    const p = path.resolve(d.path ?? '');
    if (!(await stat(p).catch(() => null))) throw new ExecutorError('bad_input', `data.path ${p} does not exist on this agent`);
    return p;
  }
  if (d.source === 'url') return download(ctx, work, d.url ?? '', redact);
  const files = ctx.inputFiles.filter((f) => f.targetPath === undefined || f.targetPath === 'data.file_key');
  if (files.length === 0) throw new ExecutorError('bad_input', 'the task has no capture file (the parameter targeting data.file_key)');
  if (files.length === 1) {
    const f = files[0]!;
    // keep the uploaded name's extension (the agent names its download <i>-<name>)
    return f.localPath;
  }
  const dir = path.join(work, 'input', 'images');
  await mkdir(dir, { recursive: true });
  for (const [i, f] of files.entries()) await linkOrCopy(f.localPath, path.join(dir, `${i}_${path.basename(f.fileName || f.localPath)}`));
  return dir;
}

async function download(ctx: ExecContext, work: string, url: string, redact: string[]): Promise<string> {
  const shown = redactText(url, redact);
  ctx.onProgress({ progress: 0, step_current: 0, step_total: 1, current_node: 'download', stage: 'download', message: `downloading ${shown}` });
  let res: Response;
  try {
    res = await fetch(url, { signal: ctx.signal, redirect: 'follow' });
  } catch (e) {
    if (ctx.signal.aborted) throw cancelledError();
    throw new ExecutorError('bad_input', `data.url ${shown}: ${redactText((e as Error).message, redact)}`);
  }
  if (!res.ok || !res.body) throw new ExecutorError('bad_input', `data.url ${shown}: HTTP ${res.status}`);
  const dir = path.join(work, 'download');
  await mkdir(dir, { recursive: true });
  let name = path.basename(new URL(res.url || url).pathname).replace(/[^A-Za-z0-9._-]/g, '_') || 'capture';
  if (!path.extname(name) && /zip/.test(res.headers.get('content-type') ?? '')) name += '.zip';
  const dest = path.join(dir, name);
  try {
    await pipeline(Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), createWriteStream(dest));
  } catch (e) {
    if (ctx.signal.aborted) throw cancelledError();
    throw new ExecutorError('bad_input', `data.url ${shown}: ${redactText((e as Error).message, redact)}`);
  }
  return dest;
}

/** Extracts a zip (descending through a single top folder); a directory or a single file is used as it is. */
export async function captureRoot(work: string, capture: string, unzip: (zip: string, dest: string) => Promise<void>): Promise<{ dir: string; file: string | null }> {
  const st = await stat(capture);
  if (st.isDirectory()) return { dir: capture, file: null };
  const isZip = path.extname(capture).toLowerCase() === '.zip' || (await zipMagic(capture));
  if (!isZip) {
    const ext = path.extname(capture).toLowerCase();
    if (IMAGE_EXT.has(ext)) {
      const dir = path.join(work, 'input', 'images');
      await mkdir(dir, { recursive: true });
      await linkOrCopy(capture, path.join(dir, path.basename(capture)));
      return { dir, file: null };
    }
    return { dir: path.dirname(capture), file: capture };
  }
  const dest = path.join(work, 'input');
  await mkdir(dest, { recursive: true });
  await unzip(capture, dest);
  let root = dest;
  for (;;) {
    const entries = (await readdir(root, { withFileTypes: true })).filter((e) => !e.name.startsWith('.') && e.name !== '__MACOSX');
    const only = entries[0];
    if (entries.length === 1 && only && only.isDirectory()) root = path.join(root, only.name);
    else break;
  }
  return { dir: root, file: null };
}

/** The --data (and --xml / --csv) of ns-process-data for an input type, from the capture's layout. */
export async function processInput(inputType: string, root: { dir: string; file: string | null }, processed: string, skipColmap: boolean): Promise<string[]> {
  if (inputType === 'video') {
    if (root.file) return ['--data', root.file];
    const videos = (await findFiles(root.dir, (n) => VIDEO_EXT.has(path.extname(n).toLowerCase()), 2)).sort();
    if (videos.length !== 1) throw new ExecutorError('bad_input', `input_type video needs one video file in the capture, found ${videos.length}`);
    return ['--data', videos[0]!];
  }
  if (root.file) throw new ExecutorError('bad_input', `input_type ${inputType} needs a folder or a zip, got the file ${path.basename(root.file)}`);
  const imagesDir = async (): Promise<string> => ((await hasImages(path.join(root.dir, 'images'))) ? path.join(root.dir, 'images') : root.dir);
  if (inputType === 'images') {
    if (skipColmap) {
      // --skip-colmap reads <output-dir>/colmap/sparse/0 (colmap_converter_to_nerfstudio_dataset.py): bring the capture's model
      for (const rel of [['colmap', 'sparse', '0'], ['sparse', '0']]) {
        const src = path.join(root.dir, ...rel);
        if (await isFile(path.join(src, 'cameras.bin'))) {
          const dst = path.join(processed, 'colmap', 'sparse', '0');
          await mkdir(dst, { recursive: true });
          for (const f of await readdir(src)) await copyFile(path.join(src, f), path.join(dst, f));
          break;
        }
      }
    }
    return ['--data', await imagesDir()];
  }
  if (inputType === 'metashape' || inputType === 'realitycapture') {
    const ext = inputType === 'metashape' ? '.xml' : '.csv';
    const found = await findFiles(root.dir, (n) => path.extname(n).toLowerCase() === ext, 2);
    if (found.length !== 1) throw new ExecutorError('bad_input', `input_type ${inputType} needs exactly one ${ext} camera export in the capture, found ${found.length}`);
    return ['--data', await imagesDir(), inputType === 'metashape' ? '--xml' : '--csv', found[0]!];
  }
  return ['--data', root.dir]; // polycam, record3d, odm: the export folder as the app wrote it
}

export const isFile = async (p: string): Promise<boolean> => (await stat(p).catch(() => null))?.isFile() ?? false;
const hasImages = async (dir: string): Promise<boolean> => (await readdir(dir).catch(() => [] as string[])).some((f) => IMAGE_EXT.has(path.extname(f).toLowerCase()));

async function zipMagic(file: string): Promise<boolean> {
  try {
    const { open } = await import('node:fs/promises');
    const fh = await open(file, 'r');
    try {
      const b = Buffer.alloc(4);
      await fh.read(b, 0, 4, 0);
      return b.equals(Buffer.from([0x50, 0x4b, 0x03, 0x04]));
    } finally {
      await fh.close();
    }
  } catch {
    return false;
  }
}

async function findFiles(dir: string, pred: (name: string) => boolean, depth: number): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string, left: number): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      if (e.name.startsWith('.') || e.name === '__MACOSX') continue;
      const p = path.join(d, e.name);
      if (e.isFile() && pred(e.name)) out.push(p);
      else if (e.isDirectory() && left > 0) await walk(p, left - 1);
    }
  };
  await walk(dir, depth);
  return out;
}

async function linkOrCopy(src: string, dest: string): Promise<void> {
  await symlink(path.resolve(src), dest).catch(() => copyFile(src, dest));
}
