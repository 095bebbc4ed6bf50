/** The signed-in session (tokens and the selected team), kept in localStorage, and the API client bound to it. */
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import { GantryClient, type Tokens } from './api.ts';

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
  for (const l of listeners) l();
});

export const api = new GantryClient({
  baseUrl: '/api/v1',
  tokens: () => state.tokens,
  teamId: () => state.teamId,
  onTokens: (t) => session.setTokens(t),
});

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
