/**
 * The files module (docs/api.md): staged uploads, multipart, task output links and retention,
 * the model and custom node registries, and the agent sync manifest. main.ts builds it once with
 * createFiles() and hands its parts to the routes, the run endpoint, the scheduler's agent info
 * and the agent stream.
 */
import type { Database } from '../persistence/db.js';
import type { ObjectStore } from '../storage/port.js';
import type { Logger } from '../shared/logger.js';
import { FileStaging } from './staging.js';
import { MultipartUploads } from './multipart.js';
import { TaskOutputs } from './outputs.js';
import { ModelRegistry, NodeRegistry } from './registry.js';
import { ModelSync } from './sync.js';
import { FileSweepers } from './sweepers.js';
import { FilesStore } from './store.js';

export { FileStaging, partSizing, MAX_MULTIPART_BYTES } from './staging.js';
export type { Caller, PresignResult, StagedRow } from './staging.js';
export { MultipartUploads } from './multipart.js';
export { TaskOutputs, outputEntries } from './outputs.js';
export { ModelRegistry, NodeRegistry, measureObject, modelJson, nodeJson } from './registry.js';
export { ModelSync, nodeInventoryName } from './sync.js';
export type { AgentInventory, SyncManifest, SyncModel, SyncCustomNode } from './sync.js';
export { FileSweepers } from './sweepers.js';
export { FilesStore } from './store.js';
export { sanitizeFileName, stagedKey, outputPrefix, isTeamKey } from './keys.js';

export interface FilesDeps {
  db: Database;
  store: ObjectStore;
  logger: Logger;
  now: () => number;
  /** GANTRY_MAX_UPLOAD_BYTES. */
  maxUploadBytes: number;
  /** GANTRY_INPUT_RETENTION_S. */
  inputRetentionS: number;
  /** GANTRY_OUTPUT_RETENTION_S. */
  outputRetentionS: number;
  /** Sweep period. Default 60 s. */
  sweepIntervalMs?: number;
  /** After a change to a team's active models or nodes (main.ts refreshes live sessions). */
  onRegistryChange?: (teamId: string) => void;
}

export interface Files {
  staging: FileStaging;
  multipart: MultipartUploads;
  outputs: TaskOutputs;
  models: ModelRegistry;
  nodes: NodeRegistry;
  sync: ModelSync;
  sweepers: FileSweepers;
}

export function createFiles(d: FilesDeps): Files {
  const logger = d.logger.child({ component: 'files' });
  const records = new FilesStore(d.db);
  const staging = new FileStaging({ records, store: d.store, maxUploadBytes: d.maxUploadBytes, retentionS: d.inputRetentionS, now: d.now, logger });
  const multipart = new MultipartUploads({ records, store: d.store, staging, now: d.now, logger });
  const outputs = new TaskOutputs({ records, store: d.store, retentionS: d.outputRetentionS, now: d.now, logger });
  let sync: ModelSync | null = null;
  const onChange = (teamId: string): void => {
    sync?.invalidate(teamId);
    d.onRegistryChange?.(teamId);
  };
  const models = new ModelRegistry({ records, store: d.store, staging, logger, onChange });
  const nodes = new NodeRegistry({ records, store: d.store, staging, logger, onChange });
  sync = new ModelSync({ models, nodes, store: d.store, now: d.now });
  const sweepers = new FileSweepers({ staged: staging, multipart, outputs, intervalMs: d.sweepIntervalMs ?? 60_000, logger });
  return { staging, multipart, outputs, models, nodes, sync, sweepers };
}
