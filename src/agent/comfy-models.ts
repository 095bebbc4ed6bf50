/**
 * The model files a ComfyUI can see, which is what a comfyui agent advertises (a workflow's
 * required_models only matches files ComfyUI can load):
 *  - under the models root, only the known folders of folder_paths.py (`folder_names_and_paths`)
 *    and, in each, only files with that folder's extensions (supported_pt_extensions, `.yaml` for
 *    configs, no extension for classifiers); files are found recursively (recursive_search, `.git`
 *    skipped) and the extension test is case-insensitive (filter_files_extensions);
 *  - plus the directories of extra_model_paths.yaml (utils/extra_config.py load_extra_path_config):
 *    every section's keys name a folder (`unet` and `clip` are the legacy names of diffusion_models
 *    and text_encoders, folder_paths.map_legacy) and a value of one or more newline-separated paths,
 *    joined to the section's `base_path` (`~` and `$VARS` expanded, relative to the yaml file's
 *    directory), else relative to the yaml file's directory. A folder unknown to folder_paths.py
 *    accepts every extension (add_model_folder_path creates it with an empty set). Files found
 *    there are advertised as `<key>/<path inside that dir>`, the path a file of the models root's
 *    `<key>` folder has. `custom_nodes` entries are not model folders and are not scanned.
 * Paths are `/`-separated, relative, sorted, deduplicated; dot entries (the agent's `.gantry-*`
 * files among them) are never reported.
 */
import { existsSync, readFileSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { ModelEntry } from './discovery.js';

/** folder_paths.supported_pt_extensions */
export const SUPPORTED_PT_EXTENSIONS: ReadonlySet<string> = new Set(['.ckpt', '.pt', '.pt2', '.bin', '.pth', '.safetensors', '.pkl', '.sft']);

/**
 * folder_paths.folder_names_and_paths: folder name -> the directories under models/ and the
 * extensions (an empty set = any file; `diffusers` lists directories, never files).
 */
export const COMFY_MODEL_FOLDERS: ReadonlyMap<string, { dirs: readonly string[]; exts: ReadonlySet<string> }> = new Map([
  ['checkpoints', { dirs: ['checkpoints'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['configs', { dirs: ['configs'], exts: new Set(['.yaml']) }],
  ['loras', { dirs: ['loras'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['vae', { dirs: ['vae'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['text_encoders', { dirs: ['text_encoders', 'clip'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['diffusion_models', { dirs: ['unet', 'diffusion_models'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['clip_vision', { dirs: ['clip_vision'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['style_models', { dirs: ['style_models'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['embeddings', { dirs: ['embeddings'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['diffusers', { dirs: ['diffusers'], exts: new Set(['folder']) }],
  ['vae_approx', { dirs: ['vae_approx'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['controlnet', { dirs: ['controlnet', 't2i_adapter'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['gligen', { dirs: ['gligen'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['upscale_models', { dirs: ['upscale_models'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['hypernetworks', { dirs: ['hypernetworks'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['photomaker', { dirs: ['photomaker'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['classifiers', { dirs: ['classifiers'], exts: new Set(['']) }],
  ['model_patches', { dirs: ['model_patches'], exts: SUPPORTED_PT_EXTENSIONS }],
  ['audio_encoders', { dirs: ['audio_encoders'], exts: SUPPORTED_PT_EXTENSIONS }],
]);

/** folder_paths.map_legacy */
export const mapLegacyFolder = (name: string): string => ({ unet: 'diffusion_models', clip: 'text_encoders' })[name] ?? name;

/** filter_files_extensions: os.path.splitext(name)[-1].lower() in exts, or any file when exts is empty. */
export function comfyExtensionOk(file: string, exts: ReadonlySet<string>): boolean {
  if (exts.size === 0) return true;
  const base = path.posix.basename(file);
  // os.path.splitext: a leading dot does not start an extension
  const i = base.lastIndexOf('.');
  const ext = i > 0 && base.slice(0, i).replace(/^\.+/, '') !== '' ? base.slice(i).toLowerCase() : '';
  return exts.has(ext);
}

/** One extra search directory: advertised under `<key>/`. */
export interface ExtraModelDir {
  /** The yaml key as written (its map_legacy name decides the extensions). */
  key: string;
  dir: string;
}

/** os.path.expandvars + expanduser, as load_extra_path_config applies them to base_path. */
function expandPath(p: string, env: NodeJS.ProcessEnv): string {
  let s = p.replace(/\$(\w+)|\$\{([^}]+)\}/g, (m, a: string | undefined, b: string | undefined) => env[(a ?? b) as string] ?? m);
  if (s === '~' || s.startsWith('~/')) s = path.join(os.homedir(), s.slice(1));
  return s;
}

/**
 * The directories an extra_model_paths.yaml adds (utils/extra_config.py load_extra_path_config).
 * Throws with the file name when the file is not valid YAML; entries whose value is not a string
 * (which would crash ComfyUI's `.split`) are skipped and returned in `ignored`.
 */
export function readExtraModelPaths(file: string, env: NodeJS.ProcessEnv = process.env): { dirs: ExtraModelDir[]; ignored: string[] } {
  const yamlDir = path.dirname(path.resolve(file));
  let config: unknown;
  try {
    config = parseYaml(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message.split('\n')[0] ?? 'invalid YAML'}`);
  }
  const dirs: ExtraModelDir[] = [];
  const ignored: string[] = [];
  if (config === null || typeof config !== 'object' || Array.isArray(config)) return { dirs, ignored };
  for (const [section, conf] of Object.entries(config as Record<string, unknown>)) {
    if (conf === null || conf === undefined) continue;
    if (typeof conf !== 'object' || Array.isArray(conf)) {
      ignored.push(section);
      continue;
    }
    const c = { ...(conf as Record<string, unknown>) };
    let basePath: string | null = null;
    if ('base_path' in c) {
      basePath = expandPath(String(c.base_path), env);
      if (!path.isAbsolute(basePath)) basePath = path.resolve(yamlDir, basePath);
      delete c.base_path;
    }
    delete c.is_default;
    for (const [key, value] of Object.entries(c)) {
      if (typeof value !== 'string') {
        ignored.push(`${section}.${key}`);
        continue;
      }
      if (key === 'custom_nodes') continue;
      for (const y of value.split('\n')) {
        if (y.length === 0) continue;
        const full = basePath ? path.join(basePath, y) : path.isAbsolute(y) ? y : path.resolve(yamlDir, y);
        dirs.push({ key, dir: path.normalize(full) });
      }
    }
  }
  return { dirs, ignored };
}

/** recursive_search: every file under dir (following symlinks, `.git` skipped), relative with `/`. */
async function filesUnder(dir: string, limit: number, maxDepth = 16): Promise<Array<{ rel: string; size: number }>> {
  const out: Array<{ rel: string; size: number }> = [];
  const walk = async (abs: string, rel: string, depth: number): Promise<void> => {
    if (depth > maxDepth || out.length >= limit) return;
    let names: string[];
    try {
      names = await readdir(abs);
    } catch {
      return;
    }
    for (const name of names.sort()) {
      if (name.startsWith('.')) continue; // .git (recursive_search), and the agent's own .gantry-* files
      const p = path.join(abs, name);
      const st = await stat(p).catch(() => null);
      if (!st) continue;
      const r = rel ? `${rel}/${name}` : name;
      if (st.isDirectory()) await walk(p, r, depth + 1);
      else if (st.isFile()) {
        out.push({ rel: r, size: st.size });
        if (out.length >= limit) return;
      }
    }
  };
  await walk(dir, '', 0);
  return out;
}

/**
 * The models a ComfyUI sees: known folders of the models root with their extensions, plus the
 * extra_model_paths.yaml directories (advertised as `<key>/<rel>`). Bounded by `limit` entries.
 */
export async function scanComfyModels(modelsDir: string | undefined, extra: readonly ExtraModelDir[] = [], limit = 100_000): Promise<ModelEntry[]> {
  const found = new Map<string, number>();
  const add = (p: string, size: number): void => {
    if (!found.has(p) && found.size < limit) found.set(p, size);
  };
  if (modelsDir && existsSync(modelsDir)) {
    for (const { dirs, exts } of COMFY_MODEL_FOLDERS.values())
      for (const d of dirs) for (const f of await filesUnder(path.join(modelsDir, d), limit)) if (comfyExtensionOk(f.rel, exts)) add(`${d}/${f.rel}`, f.size);
  }
  for (const e of extra) {
    const known = COMFY_MODEL_FOLDERS.get(mapLegacyFolder(e.key));
    const exts = known?.exts ?? new Set<string>();
    for (const f of await filesUnder(e.dir, limit)) if (comfyExtensionOk(f.rel, exts)) add(`${e.key}/${f.rel}`, f.size);
  }
  return [...found.entries()].map(([p, size]) => ({ path: p, size })).sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
