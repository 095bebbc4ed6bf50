import type { Config } from '../shared/config.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import { createIdentity, type Identity } from '../identity/index.js';
import { PgSigningKeys } from '../identity/signing-keys.js';
import { RedisWindowCounter } from '../cluster/rate-limit-redis.js';
import type { ClusterBus } from './cluster.js';
import type { Lifecycle } from './lifecycle.js';
import type { NodeSettings } from './settings.js';
import { keyRotation } from './jobs.js';

/**
 * Users, teams, credentials. Token signing keys are shared by every node through PostgreSQL
 * (encrypted with the deployment secret), unless one PEM is configured; then identity starts
 * (its caches invalidated cluster-wide over Redis in cluster mode).
 */
export async function startIdentity(life: Lifecycle, d: { config: Config; settings: NodeSettings; db: Database; deploymentSecret: string; bus: ClusterBus; clock: Clock; logger: Logger }): Promise<Identity> {
  const { config, db, logger } = d;
  const dataDir = d.settings.dataDir;
  const keyring = config.GANTRY_JWT_PRIVATE_KEY
    ? null
    : await PgSigningKeys.open({ db, secret: d.deploymentSecret, dataDir, rotateDays: config.GANTRY_JWT_ROTATE_DAYS, accessTokenTtlS: config.GANTRY_ACCESS_TOKEN_TTL_S, logger });
  if (keyring) await life.start(keyRotation(keyring, logger));
  const { redis, invalidation } = d.bus;
  const identity = createIdentity({ config, db, logger, dataDir, clock: d.clock, ...(keyring ? { keyring } : {}), ...(invalidation ? { invalidation } : {}), ...(redis ? { failureCounter: new RedisWindowCounter(redis) } : {}) });
  await life.start(identity);
  return identity;
}
