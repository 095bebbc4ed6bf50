/**
 * simulate: no GPU. Emits progress ticks, writes a real PNG rendered from the parameters.
 * Per-task overrides (parameters, workflow top level, or any graph node's inputs):
 *   simulate_duration_ms, simulate_steps, simulate_fail (message), simulate_hang, simulate_crash.
 * The failure modes are also agent-wide options (`gantry agent --simulate-fail[=message]
 * --simulate-hang --simulate-crash`): they apply to every task unless the task's own input sets
 * the same key (simulate_fail: false runs a task normally on an agent started with --simulate-fail).
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { renderSeededPng, stableStringify } from '../png.js';
import { ExecutorError, type ExecContext, type ExecResult, type Executor } from './types.js';
import { abortableSleep, abortPromise, cancelledError, describeOutput, readOverride, toBool, toNumber } from './util.js';

export interface SimulateOptions {
  /** Total simulated run time; 0 = instant. Default 1000. */
  durationMs?: number;
  /** Number of progress ticks. Default 10. */
  steps?: number;
  /** Output image size (square). Default 64. */
  imageSize?: number;
  /** Every task fails with this message (tool_error) halfway through its steps. */
  failMessage?: string;
  /** Every task hangs after its steps until cancelled. */
  hang?: boolean;
  /** Every task kills the agent process (SIGKILL) after its first progress tick. */
  crash?: boolean;
  /** Model paths reported loaded (warm placement; tests make an agent warm with it). */
  loaded?: string[];
}

export class SimulateExecutor implements Executor {
  readonly name = 'simulate';
  private readonly durationMs: number;
  private readonly steps: number;
  private readonly imageSize: number;
  private readonly failMessage: string | undefined;
  private readonly hang: boolean;
  private readonly crash: boolean;
  private readonly loadedModels: string[];

  constructor(opts: SimulateOptions = {}) {
    this.durationMs = Math.max(0, opts.durationMs ?? 1000);
    this.steps = Math.max(0, Math.floor(opts.steps ?? 10));
    this.imageSize = Math.max(1, Math.min(1024, Math.floor(opts.imageSize ?? 64)));
    this.failMessage = opts.failMessage === undefined ? undefined : opts.failMessage || 'simulated failure';
    this.hang = opts.hang ?? false;
    this.crash = opts.crash ?? false;
    this.loadedModels = opts.loaded ?? [];
  }

  loaded(): string[] {
    return this.loadedModels;
  }

  async run(ctx: ExecContext): Promise<ExecResult> {
    const ov = (k: string): unknown => readOverride(k, ctx.parameters, ctx.workflow);
    const durationMs = Math.max(0, toNumber(ov('simulate_duration_ms')) ?? this.durationMs);
    const steps = Math.max(0, Math.floor(toNumber(ov('simulate_steps')) ?? this.steps));
    // a task's own input wins over the agent-wide option
    const failRaw = ov('simulate_fail');
    const failMessage =
      failRaw === undefined ? this.failMessage : typeof failRaw === 'string' && failRaw !== '' ? failRaw : failRaw === true ? 'simulated failure' : undefined;
    const hangRaw = ov('simulate_hang');
    const hang = hangRaw === undefined ? this.hang : toBool(hangRaw);
    const crashRaw = ov('simulate_crash');
    const crash = crashRaw === undefined ? this.crash : toBool(crashRaw);

    if (ctx.signal.aborted) throw cancelledError();
    ctx.log('simulate: start', { durationMs, steps, fail: failMessage !== undefined, hang, crash });

    const stepDelay = steps > 0 ? durationMs / steps : durationMs;
    const failAt = failMessage !== undefined ? Math.floor(steps / 2) : -1;
    const tick = (i: number): void =>
      ctx.onProgress({
        progress: steps > 0 ? i / steps : 1,
        step_current: i,
        step_total: steps,
        current_node: 'simulate',
      });

    if (crash) {
      // Report one tick so the control plane sees the task running, then die the hard way.
      tick(0);
      ctx.log('simulate: crashing the process (SIGKILL) as requested');
      await new Promise((r) => setTimeout(r, 20));
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => undefined);
    }

    if (steps === 0 && durationMs > 0) await abortableSleep(durationMs, ctx.signal);
    for (let i = 1; i <= steps; i++) {
      if (i - 1 === failAt) throw new ExecutorError('tool_error', failMessage ?? 'simulated failure');
      if (stepDelay > 0) await abortableSleep(stepDelay, ctx.signal);
      else if (ctx.signal.aborted) throw cancelledError();
      tick(i);
    }
    if (failMessage !== undefined) throw new ExecutorError('tool_error', failMessage);

    if (hang) {
      ctx.log('simulate: hanging until cancelled');
      const ab = abortPromise(ctx.signal);
      await ab.promise;
    }
    if (ctx.signal.aborted) throw cancelledError();

    const png = renderSeededPng(stableStringify(ctx.parameters), {
      width: this.imageSize,
      height: this.imageSize,
      text: { Software: 'gantry simulate' },
    });
    const out = path.join(ctx.workDir, 'output.png');
    await writeFile(out, png);
    return { outputs: [await describeOutput(out, 'output.png', 'image/png')] };
  }
}
