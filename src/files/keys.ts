/**
 * Object key layout (docs/api.md). Every key starts with `teams/<team_id>/`, so a key names its
 * team and the service checks that prefix (and its own records) before it hands out any URL:
 *
 *   teams/<team>/inputs/<uuid>/<file_name>        staged input files (POST /r/files/presign)
 *   teams/<team>/models/<uuid>/<file_name>        model files (POST /models/presign)
 *   teams/<team>/nodes/<uuid>/<file_name>         custom node packages (POST /nodes/presign)
 *   teams/<team>/outputs/<task>/<attempt>/<name>  task outputs (the agent stream presigns them)
 *   teams/<team>/outputs/<task>/checkpoints/<attempt>/step-<step>.tar  training checkpoints (kept across attempts)
 *
 * The <uuid> is a fresh random v7 UUID per presign (74 random bits), so a key is never guessable,
 * and it keeps two uploads of the same file name apart.
 */
import { keyProblem } from '../storage/port.js';
import { uuidv7 } from '../shared/ids.js';

export type StagePurpose = 'input' | 'model' | 'node';

const DIR: Record<StagePurpose, string> = { input: 'inputs', model: 'models', node: 'nodes' };

export const MAX_KEY_FILE_NAME = 150;

/**
 * A file name reduced to the object-key alphabet: characters outside `A-Z a-z 0-9 . _ -` become
 * `_` (runs collapsed), leading dots and separators are dropped (no hidden files, no `.`/`..`), the
 * extension is kept when the name is shortened to 150 characters; never empty (`file`).
 */
export function sanitizeFileName(name: string): string {
  let s = name.normalize('NFKD').replace(/[\u0300-\u036f]/g, '');
  // keep only the last path segment a browser or OS might have included
  s = s.split(/[\\/]/).pop() ?? '';
  s = s.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/_+/g, '_');
  s = s.replace(/^[._-]+/, '').replace(/[_]+$/, '');
  if (s.length > MAX_KEY_FILE_NAME) {
    const dot = s.lastIndexOf('.');
    const ext = dot > 0 && s.length - dot <= 20 ? s.slice(dot) : '';
    s = s.slice(0, MAX_KEY_FILE_NAME - ext.length) + ext;
  }
  if (s === '' || s === '.' || s === '..') s = 'file';
  return s;
}

export function stagedKey(teamId: string, purpose: StagePurpose, fileName: string, now = Date.now()): string {
  const key = `teams/${teamId}/${DIR[purpose]}/${uuidv7(now)}/${sanitizeFileName(fileName)}`;
  const p = keyProblem(key);
  if (p !== null) throw new Error(`generated an invalid object key (${p}): ${key}`);
  return key;
}

export const teamPrefix = (teamId: string): string => `teams/${teamId}/`;
export const outputPrefix = (teamId: string, taskId: string): string => `teams/${teamId}/outputs/${taskId}/`;
/** Every task output of a team (checkpoints included) lies under this prefix. */
export const teamOutputsPrefix = (teamId: string): string => `teams/${teamId}/outputs/`;
/** One output file of a task's attempt (the name is checked by the caller: a plain file name). */
export const outputKey = (teamId: string, taskId: string, attempt: number, name: string): string => `${outputPrefix(teamId, taskId)}${attempt}/${name}`;
/** One checkpoint per attempt and step (objects are write-once), under the task's output prefix (swept with its outputs). */
export const checkpointKey = (teamId: string, taskId: string, attempt: number, step: number): string => `${outputPrefix(teamId, taskId)}checkpoints/${attempt}/step-${step}.tar`;

/** True when the key is well-formed and lies under the team's prefix. */
export function isTeamKey(teamId: string, key: unknown): key is string {
  return typeof key === 'string' && keyProblem(key) === null && key.startsWith(teamPrefix(teamId));
}
