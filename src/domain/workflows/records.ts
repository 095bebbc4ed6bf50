/**
 * The workflow catalog's records as the use cases and the store share them, and the parsing of the
 * `{workflowSlug}` path segment (`slug` or `slug@version`).
 */
import { invalidParameter } from '../../shared/errors.js';
import { WORKFLOW_SLUG_RE, type ToolType, type WorkflowDefinition, type WorkflowStatus } from './schema.js';

/** A workflow as stored: the definition of one version plus its catalog metadata. */
export interface WorkflowRecord {
  id: string;
  teamId: string;
  /** The definition of `version` (the current one, or the pinned one for slug@version reads). */
  definition: WorkflowDefinition;
  version: number;
  /** The workflow's current status (status is not versioned). */
  status: WorkflowStatus;
  /** ISO timestamps. For a pinned older version, updatedAt is when that version was written. */
  createdAt: string;
  updatedAt: string;
}

export interface SnapshotRecord {
  id: string;
  workflowId: string;
  version: number;
  createdAt: string;
  note: string;
}

export type WorkflowRef = { id: string } | { slug: string; version?: number | undefined };

/** What the run endpoint needs: the definition of the pinned version and where it came from. */
export interface RunnableWorkflow {
  workflow: WorkflowDefinition;
  workflowId: string;
  workflowSlug: string;
  version: number;
  snapshotId: string;
  status: WorkflowStatus;
}

export interface WorkflowListFilter {
  status?: WorkflowStatus | undefined;
  toolType?: ToolType | undefined;
}

export const WORKFLOW_NOT_FOUND = 'workflow_not_found';
export const WORKFLOW_VERSION_NOT_FOUND = 'workflow_version_not_found';


/**
 * Parses the `{workflowSlug}` path segment: `slug` or `slug@version` (version a positive integer).
 * A malformed slug or version is a 400 naming the segment.
 */
export function parseSlugRef(raw: string): { slug: string; version?: number } {
  const at = raw.lastIndexOf('@');
  const slug = at < 0 ? raw : raw.slice(0, at);
  if (slug.length < 2 || slug.length > 100 || !WORKFLOW_SLUG_RE.test(slug)) {
    throw invalidParameter(`workflowSlug: ${JSON.stringify(raw.slice(0, 120))} is not a workflow slug (expected slug or slug@version)`);
  }
  if (at < 0) return { slug };
  const v = raw.slice(at + 1);
  if (!/^[1-9][0-9]{0,8}$/.test(v)) throw invalidParameter(`workflowSlug: version ${JSON.stringify(v.slice(0, 40))} must be a positive integer (slug@version)`);
  return { slug, version: Number(v) };
}

