/** A small history-API router: the current path, navigate(), and a click handler for same-origin links. */
import { useEffect, useState } from 'preact/hooks';

const listeners = new Set<() => void>();

export function navigate(to: string, replace = false): void {
  if (to === location.pathname + location.search) return;
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  window.scrollTo(0, 0);
  for (const l of listeners) l();
}

window.addEventListener('popstate', () => {
  for (const l of listeners) l();
});

/** Plain <a href="/..."> clicks become client-side navigations (modifier clicks open tabs as usual). */
document.addEventListener('click', (ev) => {
  if (ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  const a = (ev.target as Element | null)?.closest?.('a');
  if (!a || a.target || a.hasAttribute('download')) return;
  const href = a.getAttribute('href');
  if (!href || !href.startsWith('/') || href.startsWith('//') || href.startsWith('/api/') || href.startsWith('/storage/')) return;
  ev.preventDefault();
  navigate(href);
});

export function useLocation(): { path: string; query: URLSearchParams } {
  const [, set] = useState(0);
  const rendered = location.pathname + location.search;
  useEffect(() => {
    const l = (): void => set((n) => n + 1);
    listeners.add(l);
    // a child's effect (Redirect) may have navigated before this subscription existed
    if (location.pathname + location.search !== rendered) l();
    return () => void listeners.delete(l);
  }, []);
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

/** Matches `/tasks/:id` style patterns; returns the params or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split('/').filter(Boolean);
  const s = path.split('/').filter(Boolean);
  if (p.length !== s.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    const seg = p[i] as string;
    const val = s[i] as string;
    if (seg.startsWith(':')) out[seg.slice(1)] = decodeURIComponent(val);
    else if (seg !== val) return null;
  }
  return out;
}

/** Replaces the location after render (a navigation during render would not re-render the router). */
export function Redirect({ to }: { to: string }): null {
  useEffect(() => navigate(to, true), [to]);
  return null;
}
