/**
 * The files sweepers, one timer: expired staged files (object + row), multipart uploads whose key
 * expired (aborted), and task outputs past retention (prefix deleted, tasks.output_expires_at set).
 * Each pass is bounded; a pass that hit its bound runs again soon. Safe on several nodes at once
 * (rows are claimed by `delete ... returning` / conditional updates; object deletes are idempotent).
 */
import type { Logger } from '../shared/logger.js';

export interface Sweepable {
  sweep(limit?: number): Promise<number>;
}

export class FileSweepers {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly o: {
      staged: Sweepable;
      multipart: Sweepable;
      outputs: Sweepable;
      intervalMs: number;
      logger: Logger;
    },
  ) {}

  start(): void {
    this.stopped = false;
    this.schedule(Math.min(this.o.intervalMs, 5_000));
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.sweepOnce()
        .then((n) => this.schedule(n.busy ? 1_000 : this.o.intervalMs))
        .catch((e: unknown) => {
          this.o.logger.warn({ err: e }, 'files sweep failed');
          this.schedule(this.o.intervalMs);
        })
        .finally(() => (this.running = null));
    }, ms);
    this.timer.unref?.();
  }

  /** One pass of every sweeper (tests call it directly). */
  async sweepOnce(): Promise<{ staged: number; multipart: number; outputs: number; busy: boolean }> {
    const multipart = await this.o.multipart.sweep(500);
    const staged = await this.o.staged.sweep(500);
    const outputs = await this.o.outputs.sweep(200);
    if (staged + multipart + outputs > 0) this.o.logger.info({ staged, multipart, outputs }, 'files swept');
    return { staged, multipart, outputs, busy: staged >= 500 || multipart >= 500 || outputs >= 200 };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running?.catch(() => undefined);
  }
}
