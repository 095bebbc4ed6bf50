/** The nerfstudio executor's checkpoints: uploaded during training, archived as the output without an export. */
import { link, mkdir, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { ExecContext } from './types.js';
import { redactText, writeTar } from './ns-files.js';
import { isFile } from './ns-capture.js';

/**
 * Watches the run's nerfstudio_models/ during training and hands each new checkpoint to the
 * store, one upload at a time, the newest pending one only. A step-N.ckpt is taken once the trainer
 * logged a later step (Trainer.train saves it inside step N, before going on) or has exited; it is
 * hard-linked first, since save_only_latest_checkpoint deletes it at the next save.
 */
export class CheckpointSaver {
  private timer: NodeJS.Timeout | null = null;
  private lastRow = -1;
  private uploaded = -1;
  private busy: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(
    private readonly ctx: ExecContext,
    private readonly work: string,
    private readonly runDir: string,
    private readonly dataDir: string,
    private readonly processed: boolean,
    pollMs: number,
  ) {
    if (!ctx.checkpoints) return;
    this.uploaded = ctx.checkpoints.resumeStep ?? -1;
    this.timer = setInterval(() => this.poll(false), pollMs);
    this.timer.unref();
  }

  sawStep(step: number): void {
    this.lastRow = Math.max(this.lastRow, step);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** After training: nothing more is uploaded (the run's end is the output or the export's input); waits for an upload in flight. */
  async flush(): Promise<void> {
    await this.busy;
  }

  private poll(final: boolean): void {
    if (this.stopped) return;
    const store = this.ctx.checkpoints;
    if (!store) return;
    this.busy = this.busy.then(async () => {
      const ckpt = await latestCheckpoint(path.join(this.runDir, 'nerfstudio_models'));
      if (!ckpt || ckpt.step <= this.uploaded || (ckpt.step >= this.lastRow && !final)) return;
      const staging = path.join(this.work, 'checkpoint-staging');
      await rm(staging, { recursive: true, force: true });
      await mkdir(path.join(staging, 'nerfstudio_models'), { recursive: true });
      const held = path.join(staging, 'nerfstudio_models', path.basename(ckpt.path));
      try {
        await link(ckpt.path, held);
      } catch {
        return; // deleted by a newer save: the next poll takes that one
      }
      const archive = path.join(this.work, 'checkpoint-upload.tar');
      try {
        await writeTar(archive, await checkpointEntries(this.runDir, { path: held, step: ckpt.step }, this.dataDir, this.processed));
        await store.upload(archive, ckpt.step, this.ctx.signal);
        this.uploaded = ckpt.step;
        this.ctx.log(`nerfstudio: checkpoint of step ${ckpt.step} uploaded`);
      } catch (e) {
        this.ctx.log(`nerfstudio: checkpoint of step ${ckpt.step} not uploaded: ${redactText((e as Error).message)}`);
      } finally {
        await rm(archive, { force: true });
        await rm(staging, { recursive: true, force: true });
      }
    });
  }
}

/** The checkpoint archive: config.yml, the .ckpt, and what a resume or a later export needs. */
export async function checkpointEntries(runDir: string, ckpt: { path: string; step: number }, dataDir: string, processed: boolean): Promise<Array<{ name: string; path: string }>> {
  const entries = [
    { name: 'config.yml', path: path.join(runDir, 'config.yml') },
    { name: `nerfstudio_models/${path.basename(ckpt.path)}`, path: ckpt.path },
  ];
  const optional = [
    { name: 'dataparser_transforms.json', path: path.join(runDir, 'dataparser_transforms.json') },
    ...(processed
      ? [
          { name: 'processed/transforms.json', path: path.join(dataDir, 'transforms.json') },
          { name: 'processed/sparse_pc.ply', path: path.join(dataDir, 'sparse_pc.ply') },
        ]
      : []),
  ];
  for (const o of optional) if (await isFile(o.path)) entries.push(o);
  return entries;
}

export async function latestCheckpoint(dir: string): Promise<{ path: string; step: number } | null> {
  const files = await readdir(dir).catch(() => [] as string[]);
  let best: { path: string; step: number } | null = null;
  for (const f of files) {
    const m = /^step-(\d+)\.ckpt$/.exec(f);
    if (m && (!best || Number(m[1]) > best.step)) best = { path: path.join(dir, f), step: Number(m[1]) };
  }
  return best;
}
