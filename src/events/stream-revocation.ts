/**
 * Open SSE streams end with what let them open (issue 29): the hub listens on the same invalidation
 * port the identity caches do (in memory on one node, broadcast on a cluster), so a revocation made
 * on any node ends the matching streams on every node, each with a final `: stream ended: <reason>`
 * comment.
 *
 * - credential (DELETE /credentials, device revoke, a password reset's dk-, team deletion): streams
 *   opened with one of those credentials → `credential_revoked`;
 * - session (logout, refresh-token reuse): JWT streams of those sessions → `session_ended`;
 * - user (a password reset bumps the session version): the user's JWT streams → `session_revoked`;
 * - team (deleted): every stream of the team → `team_deleted`;
 * - membership (removed, role changed, ownership moved): the user's streams in that team are
 *   re-checked against PostgreSQL and end when the user is no longer a member → `membership_ended`.
 */
import type { CacheInvalidationPort, Invalidation } from '../identity/invalidation.js';
import type { Logger } from '../shared/logger.js';
import type { SseHub, StreamMatch } from './sse.js';

/** The streams an invalidation ends at once, with the reason; null when it ends none (or needs a membership check). */
export function streamEndFor(ev: Invalidation): { match: StreamMatch; reason: string } | null {
  switch (ev.type) {
    case 'credential': {
      const ids = new Set(ev.ids);
      return { match: (_t, h) => h.credentialId !== undefined && ids.has(h.credentialId), reason: 'credential_revoked' };
    }
    case 'session': {
      const ids = new Set(ev.ids);
      return { match: (_t, h) => h.kind === 'user' && h.sessionId !== undefined && ids.has(h.sessionId), reason: 'session_ended' };
    }
    case 'user':
      return { match: (_t, h) => h.kind === 'user' && h.userId === ev.userId, reason: 'session_revoked' };
    case 'team':
      return { match: (t) => t === ev.teamId, reason: 'team_deleted' };
    case 'membership':
    case 'workflow':
    case 'container':
    case 'budget':
      return null;
  }
}

export interface StreamRevocationDeps {
  hub: SseHub;
  invalidation: Pick<CacheInvalidationPort, 'subscribe'>;
  /** Whether the user is (still) a member of the team, read from PostgreSQL. */
  isMember(teamId: string, userId: string): Promise<boolean>;
  logger: Logger;
}

/** Subscribes the hub to the invalidation port; returns the unsubscribe. */
export function endStreamsOnInvalidation(d: StreamRevocationDeps): () => void {
  return d.invalidation.subscribe((ev) => {
    const end = streamEndFor(ev);
    if (end) {
      const n = d.hub.endWhere(end.match, end.reason);
      if (n > 0) d.logger.info({ invalidation: ev.type, streams: n, reason: end.reason }, 'event streams ended by an invalidation');
      return;
    }
    if (ev.type !== 'membership') return;
    const mine: StreamMatch = (t, h) => t === ev.teamId && h.userId === ev.userId && (h.kind === 'user' || h.kind === 'device');
    if (!d.hub.holders().some((x) => mine(x.teamId, x.holder))) return;
    const checkedAt = Date.now();
    d.isMember(ev.teamId, ev.userId).then(
      (member) => {
        if (member) return;
        // only streams opened before the check: a later re-join opened its own with a fresh check
        const n = d.hub.endWhere((t, h) => h.since <= checkedAt && mine(t, h), 'membership_ended');
        if (n > 0) d.logger.info({ invalidation: ev.type, streams: n, reason: 'membership_ended' }, 'event streams ended by an invalidation');
      },
      (err: unknown) => d.logger.warn({ err, team_id: ev.teamId }, 'event streams: membership re-check failed'),
    );
  });
}
