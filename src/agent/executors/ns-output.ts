/** The nerfstudio executor's reading of the CLIs' output: ns-train's progress rows and a failed stage's error. */
import { ExecutorError } from './types.js';
import type { ToolOutput } from './ns-files.js';

export const ANSI = /\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07/g;
const STEP_ROW = /^\s*(\d+)\s+\((\d+(?:\.\d+)?)%\)/;

/** Parses LocalWriter's table rows ("1230 (12.30%)    45.123 ms   3 m, 12 s ..."). */
export class TrainOutputParser {
  private header: string[] | undefined;
  lastStep = -1;

  /** Returns a parsed row for a line, or undefined. ANSI/cursor escapes are stripped. */
  line(raw: string): { step: number; percent: number; columns: Record<string, string> } | undefined {
    const line = raw.replace(ANSI, '').replace(/\s+$/, '');
    if (line.startsWith('Step (% Done)')) {
      this.header = line.split(/\s{2,}/).slice(1);
      return undefined;
    }
    const m = STEP_ROW.exec(line);
    if (!m) return undefined;
    const step = Number(m[1]);
    const percent = Number(m[2]);
    const cells = line.trim().split(/\s{2,}/).slice(1);
    const columns: Record<string, string> = {};
    this.header?.forEach((h, i) => {
      const c = cells[i];
      if (c !== undefined) columns[h] = c;
    });
    return { step, percent, columns };
  }
}

export interface StageResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: ToolOutput;
}

/** The task error of a failed stage: how it ended and the tool's own last meaningful lines. */
export function stageError(name: string, r: StageResult, what: string | undefined, redact: readonly string[]): ExecutorError {
  const how = what ?? (r.code !== null ? `exited with code ${r.code}` : `was killed by ${r.signal ?? 'a signal'}`);
  const tail = r.output.tail(15, redact);
  const stage = name === 'ns-process-data' ? 'process_data' : name === 'ns-train' ? 'train' : name === 'ns-export' ? 'export' : 'download';
  return new ExecutorError('tool_error', `${name} ${how}${tail ? `:\n${tail}` : ''}`, { details: { stage, exit_code: r.code, signal: r.signal } });
}
