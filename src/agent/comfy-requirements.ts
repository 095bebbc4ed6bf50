/**
 * RequirementsInstaller: a synced package's requirements.txt is installed with ComfyUI's Python
 * (`<python> -m pip install -r requirements.txt` in the package dir; its output is logged). A failure
 * is remembered: a task whose workflow uses a node class ComfyUI lacks fails with that reason, tasks
 * that do not need the package are not affected.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import type { Logger } from '../shared/logger.js';
import { childEnv, lineSplitter } from './comfy-child.js';
import type { ComfyNodes } from './comfy-nodes.js';
import { SYNC_STATE_FILE } from './sync.js';

const ReqState = z.object({ version: z.literal(1), entries: z.record(z.string(), z.object({ sha256: z.string() })) });
export const REQUIREMENTS_STATE_FILE = '.gantry-requirements.json';

/** The packages sync installed: `.gantry-sync.json` entries whose directory exists (name, version, sha). */
export async function syncedPackages(dir: string | undefined): Promise<Array<{ name: string; version: string; sha256: string }>> {
  if (!dir) return [];
  try {
    const j = z
      .object({ entries: z.record(z.string(), z.object({ node_version: z.string(), sha256: z.string() })) })
      .parse(JSON.parse(await readFile(path.join(dir, SYNC_STATE_FILE), 'utf8')));
    const out: Array<{ name: string; version: string; sha256: string }> = [];
    for (const [name, s] of Object.entries(j.entries)) if (existsSync(path.join(dir, name))) out.push({ name, version: s.node_version, sha256: s.sha256 });
    return out.sort((a, b) => (a.name < b.name ? -1 : 1));
  } catch {
    return [];
  }
}

export class RequirementsInstaller {
  /** package -> requirements.txt hash tried by this process (a failure is not retried until it changes or the agent restarts). */
  private tried = new Map<string, string>();
  private warnedNoPython = false;

  constructor(
    private readonly o: { python: string | undefined; customNodesDir: string; logger: Logger; nodes: ComfyNodes; timeoutMs?: number },
  ) {}

  private async readState(): Promise<z.infer<typeof ReqState>> {
    try {
      return ReqState.parse(JSON.parse(await readFile(path.join(this.o.customNodesDir, REQUIREMENTS_STATE_FILE), 'utf8')));
    } catch {
      return { version: 1, entries: {} };
    }
  }

  /** Installs what the given packages need (skipping those installed from the same requirements.txt before). */
  async ensure(packages: readonly string[]): Promise<void> {
    const state = await this.readState();
    let dirty = false;
    for (const pkg of packages) {
      const file = path.join(this.o.customNodesDir, pkg, 'requirements.txt');
      const text = await readFile(file).catch(() => null);
      if (text === null) {
        this.o.nodes.requirementFailures.delete(pkg);
        continue;
      }
      const sha = createHash('sha256').update(text).digest('hex');
      if (state.entries[pkg]?.sha256 === sha || this.tried.get(pkg) === sha) continue;
      this.tried.set(pkg, sha);
      if (!this.o.python) {
        const why = 'the agent has no --comfy-python to install its requirements.txt with';
        this.o.nodes.requirementFailures.set(pkg, why);
        if (!this.warnedNoPython) this.o.logger.warn({ package: pkg }, `custom node requirements not installed: ${why}`);
        this.warnedNoPython = true;
        continue;
      }
      const error = await this.install(pkg, file);
      if (error === null) {
        this.o.nodes.requirementFailures.delete(pkg);
        state.entries[pkg] = { sha256: sha };
        dirty = true;
      } else this.o.nodes.requirementFailures.set(pkg, error);
    }
    if (dirty) {
      const f = path.join(this.o.customNodesDir, REQUIREMENTS_STATE_FILE);
      await writeFile(`${f}.tmp`, `${JSON.stringify(state, null, 1)}\n`);
      await rename(`${f}.tmp`, f);
    }
  }

  /** `<python> -m pip install -r requirements.txt` in the package dir; null on success, else the error. */
  private install(pkg: string, file: string): Promise<string | null> {
    const python = this.o.python as string;
    const log = this.o.logger.child({ component: 'pip', package: pkg });
    log.info({ python, requirements: file }, 'installing custom node requirements');
    return new Promise((resolve) => {
      const tail: string[] = [];
      const child = spawn(python, ['-m', 'pip', 'install', '-r', file], { cwd: path.dirname(file), stdio: ['ignore', 'pipe', 'pipe'], env: childEnv() });
      const timer = setTimeout(() => child.kill('SIGKILL'), this.o.timeoutMs ?? 30 * 60_000);
      const relay = (stream: string) => lineSplitter((line) => {
        log.info({ stream, line }, 'pip output');
        tail.push(line);
        if (tail.length > 20) tail.shift();
      });
      child.stdout.on('data', relay('stdout'));
      child.stderr.on('data', relay('stderr'));
      child.on('error', (e) => {
        clearTimeout(timer);
        log.warn({ err_message: e.message }, 'custom node requirements: could not run pip');
        resolve(`could not run ${python} -m pip: ${e.message}`);
      });
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        if (code === 0) {
          log.info('custom node requirements installed');
          return resolve(null);
        }
        const errs = tail.filter((l) => /error/i.test(l));
        const detail = (errs.length ? errs : tail).slice(-3).join(' | ');
        const error = `${path.basename(python)} -m pip install -r requirements.txt failed (${signal ? `killed by ${signal}` : `exit ${code}`})${detail ? `: ${detail}` : ''}`;
        log.warn({ error }, 'custom node requirements could not be installed: tasks using its nodes fail');
        resolve(error);
      });
    });
  }
}
