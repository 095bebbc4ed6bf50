/**
 * ComfyNodes: which custom node packages ComfyUI has really loaded. ComfyUI imports custom_nodes
 * only at start-up (nodes.py init_external_custom_nodes): a package copied in while it runs is
 * invisible until a restart, a package without `__init__.py`, one ending in `.disabled`, or one whose
 * import raises (a requirement ComfyUI never installs) is missing for good. Every node class of a
 * loaded package carries `python_module: "custom_nodes.<module>"` in /object_info
 * (load_custom_node sets RELATIVE_PYTHON_MODULE; server.py node_info reports it), so a package is
 * advertised only when a class of it is listed there, by a ComfyUI started after the package was
 * installed (a "generation": a process start in managed mode, a new /ws connection otherwise).
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import type { Logger } from '../shared/logger.js';

/** The module name nodes.py gives an entry of custom_nodes (get_module_name): a file loses its .py. */
export const moduleOfEntry = (entry: string): string => (entry.endsWith('.py') ? entry.slice(0, -3) : entry);

const ObjectInfo = z.record(z.string(), z.object({ python_module: z.string().optional() }).passthrough());

/** Why a package on disk is not loaded (requirements, the import error ComfyUI logged, or no restart yet). */
export interface NodeProblem {
  entry: string;
  reason: string;
}

export class ComfyNodes {
  /** Incremented at every ComfyUI start (managed) or new /ws connection (external). */
  generation = 0;
  /** class -> python_module, from the last /object_info read. */
  private classes: Map<string, string> | null = null;
  private modules = new Set<string>();
  /** The generation the modules were read from. */
  private modulesGen = -1;
  /** Package entry -> the generation that was current when sync installed it (not loaded by it). */
  private installedAt = new Map<string, number>();
  /** Package entry -> why its requirements are not installed. */
  readonly requirementFailures = new Map<string, string>();
  /** Module -> the exception ComfyUI logged importing it ("Cannot import ... module for custom nodes: ..."). */
  readonly importErrors = new Map<string, string>();

  constructor(private readonly o: { baseUrl: string; logger: Logger; fetchTimeoutMs?: number }) {}

  newGeneration(): void {
    this.generation++;
    this.importErrors.clear();
  }

  /** GET /object_info; false when ComfyUI did not answer (the last known classes are kept). */
  async refresh(): Promise<boolean> {
    const gen = this.generation;
    try {
      const res = await fetch(`${this.o.baseUrl}/object_info`, { signal: AbortSignal.timeout(this.o.fetchTimeoutMs ?? 30_000) });
      if (!res.ok) {
        await res.arrayBuffer().catch(() => undefined);
        return false;
      }
      const info = ObjectInfo.parse(await res.json());
      this.classes = new Map(Object.entries(info).map(([k, v]) => [k, v.python_module ?? 'nodes']));
      this.modules = new Set([...this.classes.values()].filter((m) => m.startsWith('custom_nodes.')).map((m) => m.slice('custom_nodes.'.length)));
      this.modulesGen = gen;
      return true;
    } catch (e) {
      this.o.logger.debug({ err_message: (e as Error).message }, 'comfyui: /object_info not available');
      return false;
    }
  }

  /** The class_types of the last /object_info read, sorted ([] before the first). */
  classNames(): string[] {
    return this.classes ? [...this.classes.keys()].sort() : [];
  }

  get known(): boolean {
    return this.classes !== null;
  }

  hasClass(c: string): boolean {
    return this.classes?.has(c) ?? false;
  }

  /** Sync (re)installed this package while the current ComfyUI runs: not loaded until the next generation. */
  markInstalled(entry: string): void {
    this.installedAt.set(entry, this.generation);
  }

  /** Whether ComfyUI has loaded this custom_nodes entry (a dir name or file.py) since it was installed. */
  loaded(entry: string): boolean {
    const at = this.installedAt.get(entry);
    if (at !== undefined && at >= this.modulesGen) return false;
    return this.modules.has(moduleOfEntry(entry));
  }

  /** Inventory entries (`name` or `name@version`) split into loaded ones and the rest. */
  split(inventory: readonly string[]): { loaded: string[]; notLoaded: string[] } {
    const loaded: string[] = [];
    const notLoaded: string[] = [];
    for (const e of inventory) (this.loaded(e.split('@')[0] ?? e) ? loaded : notLoaded).push(e);
    return { loaded, notLoaded };
  }

  /** Why an entry is not loaded. */
  reason(entry: string): string {
    const req = this.requirementFailures.get(entry);
    if (req) return `its requirements could not be installed: ${req}`;
    const at = this.installedAt.get(entry);
    if (at !== undefined && at >= this.modulesGen) return 'it was installed after ComfyUI started, and ComfyUI imports custom nodes only at start-up (restart ComfyUI, or let the agent manage it with --comfy-cmd)';
    const imp = this.importErrors.get(moduleOfEntry(entry));
    if (imp) return `ComfyUI failed to import it: ${imp}`;
    return 'ComfyUI did not load it (IMPORT FAILED in the ComfyUI log, no __init__.py, or no node class)';
  }
}

/** The quoted class names found in a package's .py files (bounded): which package a missing class comes from. */
export async function packageMentions(dir: string, names: readonly string[]): Promise<Set<string>> {
  const found = new Set<string>();
  let files = 0;
  const walk = async (d: string, depth: number): Promise<void> => {
    if (depth > 3 || files > 300 || found.size === names.length) return;
    const entries = await readdir(d, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (e.name.startsWith('.') || e.name === '__pycache__') continue;
      const p = path.join(d, e.name);
      if (e.isDirectory()) await walk(p, depth + 1);
      else if (e.name.endsWith('.py') && files++ < 300) {
        const text = await readFile(p, 'utf8').catch(() => '');
        for (const n of names) if (text.includes(`"${n}"`) || text.includes(`'${n}'`)) found.add(n);
      }
    }
  };
  if ((await stat(dir).catch(() => null))?.isDirectory()) await walk(dir, 0);
  else if (dir.endsWith('.py')) {
    const text = await readFile(dir, 'utf8').catch(() => '');
    for (const n of names) if (text.includes(`"${n}"`) || text.includes(`'${n}'`)) found.add(n);
  }
  return found;
}
