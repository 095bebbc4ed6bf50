import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { PgSigningKeys } from '../identity/signing-keys.js';
import type { LeasePort, SingletonJob } from '../cluster/leases.js';
import type { Cluster } from '../cluster/index.js';
import { AuditRetention, type AuditStore } from '../persistence/audit.js';
import type { PgTaskStore } from '../persistence/task-store.js';
import type { LocalActorSystem } from '../actors/runtime/system.js';
import { SCHEDULER } from '../actors/index.js';
import type { Protocols } from '../actors/ports.js';
import type { Participant } from './lifecycle.js';

/** A timer as a participant: started with the node, cleared at its place in the stop order. */
function every(ms: number, tick: () => void): Participant {
  let timer: NodeJS.Timeout | null = null;
  return {
    start() {
      timer = setInterval(tick, ms);
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
    },
  };
}

/** The token signing keys (shared through PostgreSQL): rotated when due and reloaded (another node may have rotated them) every minute. */
export function keyRotation(keyring: PgSigningKeys, logger: Logger): Participant {
  return every(60_000, () => {
    void keyring
      .rotateIfDue()
      .then(() => keyring.reload())
      .catch((e: unknown) => logger.warn({ err: e }, 'signing keys: reload/rotation failed'));
  });
}

/**
 * The schedulers' safety net: every 10 s each team with pending/waiting tasks gets a resync on the
 * node that owns its scheduler (its view is rebuilt from PostgreSQL): a wake-up lost with a dead node,
 * a crashed scheduler, or tasks taken by a second scheduler during a view change must not leave tasks
 * waiting
 */
export function schedulerWatch(d: { resyncMs: number; taskStore: PgTaskStore; actors: LocalActorSystem<Protocols>; cluster: Cluster<Protocols> | null }): Participant {
  const { resyncMs, actors, cluster } = d;
  return every(Math.max(1_000, 2 * (resyncMs || 5_000)), () => {
    if (resyncMs <= 0) return;
    void d.taskStore
      .teamsWithSchedulable()
      .then((teams) => {
        for (const team of teams) {
          const ref = { kind: SCHEDULER, id: team } as const;
          if (!cluster || cluster.owns(ref)) actors.tell(ref, { type: 'resync' });
        }
      })
      .catch(() => undefined);
  });
}

/** A cluster-wide singleton job, run on the lease holder only. */
export function singleton(leases: LeasePort, name: string, job: SingletonJob): Participant {
  let release: (() => Promise<void>) | null = null;
  return {
    start() {
      release = leases.hold(name, job);
    },
    stop: () => release?.(),
  };
}

/** The audit log's retention (GANTRY_AUDIT_RETENTION_DAYS): old entries are deleted. */
export function createAuditRetention(d: { store: AuditStore; retentionDays: number; clock: Clock; logger: Logger }): AuditRetention {
  const { logger } = d;
  return new AuditRetention({
    store: d.store,
    retentionDays: d.retentionDays,
    now: () => d.clock.now(),
    onError: (e) => logger.warn({ err: e }, 'audit retention sweep failed'),
    onSwept: (n) => logger.info({ deleted: n }, 'audit retention: old entries deleted'),
  });
}
