/** The nerfstudio executor's child processes: finding the CLIs, and killing their process groups with the agent. */
import { accessSync, constants as fsc, readFileSync } from 'node:fs';
import path from 'node:path';

/**
 * The watchdog beside each CLI: a tiny node process holding a pipe from the agent. When the agent
 * dies the pipe closes and it SIGKILLs the CLI's whole process group (workers included), unless the
 * group leader is no longer the process it was given (start time: a reused pid is not ours).
 */
export const WATCHDOG = `
const fs = require('node:fs');
const pgid = Number(process.argv[1]);
const start = (p) => { try { const s = fs.readFileSync('/proc/' + p + '/stat', 'utf8'); return s.slice(s.lastIndexOf(')') + 2).split(' ')[19]; } catch { return null; } };
const was = start(pgid);
process.stdin.on('data', () => {});
process.stdin.on('end', () => { const now = start(pgid); if (now === null || now === was) { try { process.kill(-pgid, 'SIGKILL'); } catch {} } process.exit(0); });
process.stdin.on('error', () => process.stdin.emit('end'));
`;

/** The executable a command name runs (a path, or the first match on PATH), or null. */
export function resolveExecutable(cmd: string): string | null {
  const candidates = cmd.includes('/') ? [cmd] : (process.env.PATH ?? '').split(path.delimiter).filter(Boolean).map((d) => path.join(d, cmd));
  for (const c of candidates) {
    try {
      accessSync(c, fsc.X_OK);
      return c;
    } catch {
      /* next */
    }
  }
  return null;
}

export function findSetpriv(): string | null {
  for (const p of ['/usr/bin/setpriv', '/bin/setpriv', '/usr/sbin/setpriv']) {
    try {
      accessSync(p, fsc.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return null;
}

/** /proc/<pid>/stat field 22 (start time in clock ticks): tells a recorded process from a reused pid. */
export function startTimeOf(pid: number): string | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

export function killGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') {
      try {
        process.kill(pgid, signal);
      } catch {
        /* already gone */
      }
    }
  }
}
