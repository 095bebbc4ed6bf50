import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import type { ObjectStore } from '../storage/index.js';
import { createFiles, type Files } from '../files/index.js';
import type { NodeSettings } from './settings.js';

/**
 * files <-> agent streams: the streams read the registries (needsSync, the sync manifest), and a
 * change to a team's active models or custom nodes must reach the streams (live sessions recompute
 * needsSync, this node's agents of the team are told to sync now). The files module is built
 * first and announces its changes here; the agents module, built from it, listens. The one port
 * that breaks this cycle.
 */
export class RegistryChanges {
  private readonly listeners: Array<(teamId: string) => void> = [];

  /** A team's active models or custom nodes changed. */
  changed(teamId: string): void {
    for (const l of this.listeners) l(teamId);
  }

  listen(l: (teamId: string) => void): void {
    this.listeners.push(l);
  }
}

/** Staged files, multipart, output links/retention, model and node registries, sync manifest, sweepers. */
export function createFilesModule(d: { config: Config; settings: NodeSettings; db: Database; objectStore: ObjectStore; clock: Clock; logger: Logger }): { files: Files; registryChanges: RegistryChanges } {
  const { clock } = d;
  const registryChanges = new RegistryChanges();
  const files = createFiles({
    db: d.db,
    store: d.objectStore,
    logger: d.logger,
    now: () => clock.now(),
    maxUploadBytes: d.config.GANTRY_MAX_UPLOAD_BYTES,
    inputRetentionS: d.config.GANTRY_INPUT_RETENTION_S,
    outputRetentionS: d.settings.outputRetentionS,
    onRegistryChange: (teamId) => registryChanges.changed(teamId),
  });
  return { files, registryChanges };
}
