import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import type { PgTaskStore } from '../persistence/task-store.js';
import type { ObjectStore } from '../storage/index.js';
import { VaultKeyring } from '../vault/keyring.js';
import { VaultStore } from '../vault/store.js';
import { CloudProviderStore, type CloudCredentials } from '../cloud/store.js';
import { CloudRunner } from '../cloud/runner.js';
import { ComfyCloudClient } from '../cloud/comfy-cloud.js';
import type { CloudProviderSlug } from '../cloud/provider.js';
import { OutboundGuard } from '../events/outbound.js';
import type { Participant } from './lifecycle.js';
import type { NodeSettings } from './settings.js';

export interface CloudModule {
  /** Team credentials (external services' auth headers). */
  vault: VaultStore;
  cloudStore: CloudProviderStore;
  cloudGuard: OutboundGuard;
  cloudClient: (provider: CloudProviderSlug, c: CloudCredentials) => ComfyCloudClient;
  cloudRunner: CloudRunner;
  /** Cloud jobs stop being followed (the provider's jobs go on; the next owner re-attaches). */
  participant: Participant;
}

/** The credential vault, and hosted cloud providers: team keys under the vault keyring, provider calls through the outbound guard. */
export function createCloud(d: { config: Config; settings: NodeSettings; deploymentSecret: string; db: Database; taskStore: PgTaskStore; objectStore: ObjectStore; clock: Clock; logger: Logger }): CloudModule {
  const { config, clock } = d;
  // the vault's keys (GANTRY_VAULT_KEYS, else derived from the deployment secret): team credentials and cloud keys
  const vaultKeyring = VaultKeyring.fromConfig({ keys: config.GANTRY_VAULT_KEYS, fallbackSecret: d.deploymentSecret });
  const cloudStore = new CloudProviderStore(d.db, vaultKeyring, () => clock.now());
  const cloudGuard = new OutboundGuard({ allowlist: d.settings.outboundAllowlist });
  const cloudCa = d.settings.outboundCa;
  const cloudClient = (_provider: CloudProviderSlug, c: CloudCredentials): ComfyCloudClient =>
    new ComfyCloudClient({ baseUrl: c.baseUrl, apiKey: c.apiKey, guard: cloudGuard, ca: cloudCa, pollMs: config.GANTRY_CLOUD_POLL_MS, timeoutMs: config.GANTRY_CLOUD_TIMEOUT_MS });
  const cloudRunner = new CloudRunner({ store: cloudStore, tasks: d.taskStore, objects: d.objectStore, client: cloudClient, logger: d.logger.child({ component: 'cloud' }), busyRetryMs: config.GANTRY_CLOUD_BUSY_RETRY_MS });
  const vault = new VaultStore(d.db, vaultKeyring, () => clock.now());
  return { vault, cloudStore, cloudGuard, cloudClient, cloudRunner, participant: { stop: () => cloudRunner.stop() } };
}
