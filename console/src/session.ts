/**
 * The signed-in session (tokens and the selected team), kept in localStorage, and the typed SDK
 * (@gantry/sdk, packages/sdk) bound to it: `sdk` for its conveniences (task events with resume,
 * presigned uploads), `api` for its typed openapi-fetch client (every path and schema of the API;
 * a non-2xx answer throws the SDK's GantryError). An expired access token is refreshed once with
 * the refresh token and the request sent again.
 */
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import { createClient } from '@gantry/sdk';

export interface Tokens {
  access_token: string;
  refresh_token: string;
}

const KEY = 'gantry.console.session';

export interface StoredSession {
  tokens: Tokens | null;
  teamId: string | null;
}

function load(): StoredSession {
  try {
    const v = JSON.parse(localStorage.getItem(KEY) ?? 'null') as StoredSession | null;
    if (v && typeof v === 'object') return { tokens: v.tokens ?? null, teamId: v.teamId ?? null };
  } catch {
    /* ignore */
  }
  return { tokens: null, teamId: null };
}

const state: StoredSession = load();
const listeners = new Set<() => void>();

function save(): void {
  localStorage.setItem(KEY, JSON.stringify(state));
  for (const l of listeners) l();
}

export const session = {
  get: (): StoredSession => state,
  setTokens(t: Tokens | null): void {
    state.tokens = t;
    if (!t) state.teamId = null;
    save();
  },
  setTeam(id: string | null): void {
    state.teamId = id;
    sdk.setTeam(id);
    save();
  },
  subscribe(l: () => void): () => void {
    listeners.add(l);
    return () => void listeners.delete(l);
  },
};

// a session changed in another tab (sign out, team switch) applies here too
window.addEventListener('storage', (e) => {
  if (e.key !== KEY) return;
  const v = load();
  state.tokens = v.tokens;
  state.teamId = v.teamId;
  sdk.setTeam(v.teamId);
  for (const l of listeners) l();
});

let refreshing: Promise<boolean> | null = null;

/** One refresh at a time; false (and signed out) when the refresh token no longer works. */
function refresh(): Promise<boolean> {
  const t = state.tokens;
  if (!t) return Promise.resolve(false);
  refreshing ??= fetch('/api/v1/auth/refresh', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ refresh_token: t.refresh_token }) })
    .then(async (r) => {
      if (!r.ok) {
        session.setTokens(null);
        return false;
      }
      const b = (await r.json()) as Tokens;
      session.setTokens({ access_token: b.access_token, refresh_token: b.refresh_token });
      return true;
    })
    .catch(() => false)
    .finally(() => (refreshing = null));
  return refreshing;
}

/** fetch for the SDK: a 401 on an API call with a session refreshes the tokens once and retries. */
async function sessionFetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const sentWith = state.tokens?.access_token ?? null;
  const again = input instanceof Request ? input.clone() : null;
  const res = await fetch(input, init);
  const url = input instanceof Request ? input.url : String(input);
  if (res.status !== 401 || sentWith === null || !url.includes('/api/v1/') || url.includes('/api/v1/auth/')) return res;
  // sent with a token another request has replaced meanwhile: send it again with the new one
  // (refreshing again would rotate the refresh token once per request in flight)
  const fresh = state.tokens !== null && state.tokens.access_token !== sentWith;
  if (!fresh && !(await refresh())) return res;
  if (!state.tokens) return res;
  const bearer = `Bearer ${state.tokens.access_token}`;
  if (again) {
    again.headers.set('Authorization', bearer);
    return fetch(again);
  }
  const headers = new Headers(init?.headers);
  headers.set('Authorization', bearer);
  return fetch(input, { ...init, headers });
}

export const sdk = createClient({ baseUrl: '/api/v1', token: () => state.tokens?.access_token, teamId: state.teamId, fetch: sessionFetch });
/** The SDK's typed client (openapi-fetch): `api.GET('/r/tasks/{taskId}', {params: {path: {taskId}}})`. */
export const api = sdk.api;

/** The body of a typed call (the SDK throws GantryError on any non-2xx, so a settled call has data). */
export async function data<T>(p: Promise<{ data?: T }>): Promise<T> {
  return (await p).data as T;
}

export interface Me {
  id: string;
  display_name: string;
  email_address: string;
  team_list: Array<{ id: string; display_name: string }>;
}

export interface AppCtx {
  me: Me;
  teamId: string;
  role: string;
  reloadMe: () => void;
}

export const Ctx = createContext<AppCtx | null>(null);

export function useApp(): AppCtx {
  const c = useContext(Ctx);
  if (!c) throw new Error('useApp outside the signed-in layout');
  return c;
}
