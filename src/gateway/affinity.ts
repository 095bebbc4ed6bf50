/**
 * Session affinity (sticky sessions) of a container service, optional per service
 * (`session_affinity`): requests of one client session go to the same instance while it is
 * healthy, on every node of the cluster, with no shared state:
 *
 * - `{mode: "header", header_name}`: the client names its session in a header; the instance is
 *   chosen by rendezvous hashing of that value over the service's usable instances, so every node
 *   picks the same one, and losing an instance moves only its own sessions.
 * - `{mode: "cookie"}`: the gateway pins the client to the instance that answered its first
 *   request with a cookie `gantry_affinity_<slug>` (the instance id); a pinned instance that is
 *   gone, unhealthy or ejected is replaced (and the cookie re-set).
 *
 * Without the header or cookie a request is balanced as usual. A pinned instance at its concurrent
 * request cap is not waited for: the request is balanced as usual (and, for cookie mode, re-pinned).
 */
import type { SessionAffinity } from '../domain/containers/schema.js';
import type { HeaderList } from './tunnel.js';

/** What the balancer is asked to honour for one request. */
export type Affinity = { kind: 'key'; key: string } | { kind: 'instance'; instanceId: string };

export const affinityCookieName = (slug: string): string => `gantry_affinity_${slug}`;

const header = (hs: HeaderList, name: string): string | undefined => {
  const n = name.toLowerCase();
  for (const [k, v] of hs) if (k.toLowerCase() === n) return v;
  return undefined;
};

/** The value of cookie `name` in the request's Cookie header(s). */
export function cookieValue(hs: HeaderList, name: string): string | undefined {
  for (const [k, v] of hs) {
    if (k.toLowerCase() !== 'cookie') continue;
    for (const part of v.split(';')) {
      const eq = part.indexOf('=');
      if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
    }
  }
  return undefined;
}

/** The request's affinity under the service's setting (null: balance as usual). */
export function affinityOf(setting: SessionAffinity | null, slug: string, hs: HeaderList): Affinity | null {
  if (!setting) return null;
  if (setting.mode === 'header') {
    const key = header(hs, setting.header_name);
    return key ? { kind: 'key', key } : null;
  }
  const id = cookieValue(hs, affinityCookieName(slug));
  return id ? { kind: 'instance', instanceId: id } : null;
}

/** The Set-Cookie that pins the client to `instanceId` (cookie mode), or null when it already is. */
export function pinCookie(setting: SessionAffinity | null, slug: string, affinity: Affinity | null, instanceId: string): string | null {
  if (setting?.mode !== 'cookie') return null;
  if (affinity?.kind === 'instance' && affinity.instanceId === instanceId) return null;
  return `${affinityCookieName(slug)}=${instanceId}; Path=/; HttpOnly; SameSite=Lax`;
}

/** FNV-1a 32-bit of key + '\0' + id, mixed (rendezvous weight). */
function weight(key: string, id: string): number {
  let h = 0x811c9dc5;
  const s = `${key}\0${id}`;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  return h >>> 0;
}

/** Rendezvous (highest random weight) choice of key among ids: the same on every node for the same set. */
export function rendezvous<T extends { id: string }>(key: string, candidates: readonly T[]): T | undefined {
  let best: T | undefined;
  let bestW = -1;
  for (const c of candidates) {
    const w = weight(key, c.id);
    if (w > bestW || (w === bestW && best !== undefined && c.id < best.id)) {
      best = c;
      bestW = w;
    }
  }
  return best;
}
