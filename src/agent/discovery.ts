/**
 * What the agent advertises: GPUs (nvidia-smi, or --gpu flags), model files under the models dir,
 * custom nodes, a stable machine id, and heartbeat system stats.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

export interface GpuInfo {
  name: string;
  vram_gb: number;
}

export interface GpuSample {
  index: number;
  name: string;
  utilization_percent: number;
  vram_used_gb: number;
  vram_total_gb: number;
  temperature_c: number;
}

export const NVIDIA_SMI_QUERY = ['--query-gpu=name,memory.total,utilization.gpu,memory.used,temperature.gpu', '--format=csv,noheader,nounits'];

/** MiB (what nvidia-smi reports) to decimal GB, one decimal. */
const mibToGb = (mib: number): number => Math.round(((mib * 1024 * 1024) / 1e9) * 10) / 10;

const numOr0 = (s: string | undefined): number => {
  const n = Number((s ?? '').trim());
  return Number.isFinite(n) ? n : 0;
};

/** Parses `nvidia-smi --query-gpu=name,memory.total,utilization.gpu,memory.used,temperature.gpu --format=csv,noheader,nounits`. */
export function parseNvidiaSmi(out: string): GpuSample[] {
  const gpus: GpuSample[] = [];
  for (const line of out.split(/\r?\n/)) {
    if (!line.trim()) continue;
    const parts = line.split(',').map((p) => p.trim());
    if (parts.length < 2 || !parts[0]) continue;
    gpus.push({
      index: gpus.length,
      name: parts[0],
      vram_total_gb: mibToGb(numOr0(parts[1])),
      utilization_percent: numOr0(parts[2]),
      vram_used_gb: mibToGb(numOr0(parts[3])),
      temperature_c: numOr0(parts[4]),
    });
  }
  return gpus;
}

/** Runs nvidia-smi (GANTRY_AGENT_NVIDIA_SMI overrides the binary); null when absent or failing. */
export function sampleGpus(bin = process.env.GANTRY_AGENT_NVIDIA_SMI || 'nvidia-smi'): Promise<GpuSample[] | null> {
  return new Promise((resolve) => {
    execFile(bin, NVIDIA_SMI_QUERY, { timeout: 5_000, windowsHide: true }, (err, stdout) => {
      if (err) return resolve(null);
      const g = parseNvidiaSmi(String(stdout));
      resolve(g.length ? g : null);
    });
  });
}

/** `--gpu "NVIDIA RTX 4090:24"` (repeatable; also comma-separated in GANTRY_AGENT_GPUS). */
export function parseGpuFlag(v: string): GpuInfo {
  const i = v.lastIndexOf(':');
  const name = (i >= 0 ? v.slice(0, i) : v).trim();
  const vram = i >= 0 ? Number(v.slice(i + 1).trim()) : 0;
  if (!name) throw new Error(`--gpu ${JSON.stringify(v)}: expected NAME:VRAM_GB, e.g. "NVIDIA RTX 4090:24"`);
  if (!Number.isFinite(vram) || vram < 0 || vram > 4096) throw new Error(`--gpu ${JSON.stringify(v)}: VRAM must be a number of GB`);
  return { name, vram_gb: vram };
}

export interface ModelEntry {
  path: string;
  size: number;
}

/** Every regular file under dir (relative paths with `/`, sorted), skipping dot entries. Bounded. */
export async function scanModels(dir: string | undefined, limit = 100_000, maxDepth = 8): Promise<ModelEntry[]> {
  if (!dir || !existsSync(dir)) return [];
  const out: ModelEntry[] = [];
  const walk = async (abs: string, rel: string, depth: number): Promise<void> => {
    if (depth > maxDepth || out.length >= limit) return;
    let entries: string[];
    try {
      entries = await readdir(abs);
    } catch {
      return;
    }
    for (const name of entries.sort()) {
      if (name.startsWith('.') || name === '__pycache__') continue;
      const p = path.join(abs, name);
      let st;
      try {
        st = await stat(p); // follows symlinks (model dirs are often symlinked)
      } catch {
        continue;
      }
      const r = rel ? `${rel}/${name}` : name;
      if (st.isDirectory()) await walk(p, r, depth + 1);
      else if (st.isFile()) {
        out.push({ path: r, size: st.size });
        if (out.length >= limit) return;
      }
    }
  };
  await walk(dir, '', 0);
  return out;
}

/** Custom node packages: the entries of ComfyUI's custom_nodes dir (directories and single .py files). */
export async function scanCustomNodes(dir: string | undefined): Promise<string[]> {
  if (!dir || !existsSync(dir)) return [];
  try {
    const entries = await readdir(dir, { withFileTypes: true });
    return entries
      .filter((e) => !e.name.startsWith('.') && e.name !== '__pycache__' && (e.isDirectory() || e.isSymbolicLink() || e.name.endsWith('.py')))
      .map((e) => e.name)
      .sort();
  } catch {
    return [];
  }
}

export const MACHINE_ID_RE = /^[A-Za-z0-9._:@-]{1,200}$/;

/** The stable machine id: the given one, else the one persisted in <stateDir>/agent-id (created once). */
export function resolveMachineId(given: string | undefined, stateDir: string): string {
  if (given) {
    if (!MACHINE_ID_RE.test(given)) throw new Error('--machine-id: 1-200 characters of A-Z a-z 0-9 . _ : @ -');
    return given;
  }
  const file = path.join(stateDir, 'agent-id');
  if (existsSync(file)) {
    const v = readFileSync(file, 'utf8').trim();
    if (MACHINE_ID_RE.test(v)) return v;
  }
  const id = randomUUID();
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(file, `${id}\n`, { mode: 0o600 });
  return id;
}

/** CPU utilisation between two calls (all cores), 0-100. */
export class CpuMeter {
  private last = this.snapshot();

  private snapshot(): { idle: number; total: number } {
    let idle = 0;
    let total = 0;
    for (const c of os.cpus()) {
      const t = c.times;
      idle += t.idle;
      total += t.user + t.nice + t.sys + t.idle + t.irq;
    }
    return { idle, total };
  }

  percent(): number {
    const now = this.snapshot();
    const dt = now.total - this.last.total;
    const di = now.idle - this.last.idle;
    this.last = now;
    return dt > 0 ? Math.round((1 - di / dt) * 1000) / 10 : 0;
  }
}
