/**
 * The one rule for where a registry entry may land on an agent's disk, shared by the server (POST
 * and PUT /models, POST /nodes, workflows' required_models) and the agent program (sync refuses a
 * manifest entry that breaks it). A path the API accepts is a path every agent can place, and the
 * agent re-checks it because the manifest is never trusted.
 *
 * A model_path is relative to the models root: 1-512 characters of letters, digits, `_ . - /` and
 * space; `/`-separated segments, each non-empty, at most 255 characters, not starting with a dot
 * (no `.`, `..` or hidden names: the agent's own `.gantry-*` files live there and a hidden file is
 * never reported in the inventory) and not starting or ending with a space.
 *
 * A custom node package_name is a single directory name under custom_nodes; a node_version is what
 * follows the `@` in the inventory name.
 */

export const MAX_MODEL_PATH_LENGTH = 512;
export const MAX_MODEL_PATH_SEGMENT = 255;
const MODEL_PATH_CHARS_RE = /^[A-Za-z0-9_./ -]+$/;

/** Why a model path is refused (a phrase to follow "model_path: "), or null when it is valid. */
export function modelPathProblem(p: unknown): string | null {
  if (typeof p !== 'string') return 'must be a string';
  if (p.length === 0) return 'must not be empty';
  if (p.length > MAX_MODEL_PATH_LENGTH) return `must be at most ${MAX_MODEL_PATH_LENGTH} characters`;
  if (p.startsWith('/')) return 'must be relative (must not start with /)';
  if (p.includes('..')) return 'must not contain ..';
  if (p.includes('\\')) return 'must not contain a backslash';
  if (p.includes('\0')) return 'must not contain a NUL character';
  if (!MODEL_PATH_CHARS_RE.test(p)) return 'may only contain letters, digits, underscore, dot, slash, space and hyphen';
  for (const seg of p.split('/')) {
    if (seg === '') return 'must not have empty segments (no //, no leading or trailing /)';
    if (seg.startsWith('.')) return 'no segment may start with a dot (no . or .. segments, no hidden names)';
    if (seg.startsWith(' ') || seg.endsWith(' ')) return 'no segment may start or end with a space';
    if (seg.length > MAX_MODEL_PATH_SEGMENT) return `each segment must be at most ${MAX_MODEL_PATH_SEGMENT} characters`;
  }
  return null;
}

export const isValidModelPath = (p: unknown): p is string => modelPathProblem(p) === null;

/** A directory name under the runtime's custom_nodes dir. */
export const PACKAGE_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
export const PACKAGE_NAME_RULE = 'must be 1-200 characters of A-Z a-z 0-9 . _ - starting with a letter or digit';
export const NODE_VERSION_RE = /^[A-Za-z0-9][A-Za-z0-9.+_-]{0,99}$/;
export const NODE_VERSION_RULE = 'must be 1-100 characters of A-Z a-z 0-9 . + _ - starting with a letter or digit';
