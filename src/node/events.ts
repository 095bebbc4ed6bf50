import type { Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import type { Database } from '../persistence/db.js';
import type { Cluster } from '../cluster/index.js';
import type { Protocols } from '../actors/ports.js';
import { LiveEvents } from '../events/index.js';
import type { OutboundGuard } from '../events/outbound.js';
import { closeExternalAgents } from '../gateway/external.js';
import type { ClusterBus } from './cluster.js';
import type { Participant } from './lifecycle.js';
import type { NodeSettings } from './settings.js';

/** Live events: SSE, webhook outbox/dispatcher, notifications (all fed from task_events). */
export function createLiveEvents(d: { config: Config; settings: NodeSettings; db: Database; bus: ClusterBus; clock: Clock; logger: Logger }): LiveEvents {
  const { config } = d;
  return new LiveEvents({
    db: d.db,
    bus: d.bus.events,
    clock: d.clock,
    logger: d.logger,
    outboundAllowlist: d.settings.outboundAllowlist,
    outboundCaFile: d.settings.outboundCaFile,
    maxStreamsPerTeam: config.GANTRY_SSE_MAX_STREAMS_PER_TEAM,
    keepAliveMs: config.GANTRY_SSE_KEEPALIVE_MS,
  });
}

/**
 * Live events' participant: started, and in cluster mode the SSE streams re-read PostgreSQL where
 * events may have been lost (a node died between commit and publish, a bus gap).
 */
export function liveEventsParticipant(liveEvents: LiveEvents, d: { cluster: Cluster<Protocols> | null; bus: ClusterBus }): Participant {
  return {
    async start() {
      await liveEvents.start();
      d.cluster?.onView(() => liveEvents.sse.resync());
      d.bus.redisEvents?.onGap(() => liveEvents.sse.resync());
    },
    stop: () => liveEvents.stop(),
  };
}

/** The keep-alive connections to external services and cloud providers close (after the live events stopped). */
export function outboundClose(guards: readonly OutboundGuard[]): Participant {
  return {
    stop() {
      for (const g of guards) closeExternalAgents(g);
    },
  };
}
