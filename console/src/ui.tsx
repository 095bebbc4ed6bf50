/** Shared pieces: data loading hooks, error and status display, time formatting, pagination, data tables. */
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { GantryError } from '@gantry/sdk';

export interface Async<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
}

/**
 * Runs `fn` when deps change (and every `pollMs` when given, for live lists); the previous data stays
 * while a reload runs, so live tables do not flicker.
 */
export function useAsync<T>(fn: (signal: AbortSignal) => Promise<T>, deps: unknown[], pollMs = 0): Async<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  useEffect(() => {
    const ac = new AbortController();
    setLoading(true);
    fnRef
      .current(ac.signal)
      .then((d) => {
        if (ac.signal.aborted) return;
        setData(d);
        setError(null);
      })
      .catch((e: unknown) => {
        if (!ac.signal.aborted) setError(e);
      })
      .finally(() => {
        if (!ac.signal.aborted) setLoading(false);
      });
    let timer: ReturnType<typeof setTimeout> | undefined;
    if (pollMs > 0) timer = setTimeout(() => setTick((n) => n + 1), pollMs);
    return () => {
      ac.abort();
      if (timer) clearTimeout(timer);
    };
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  return { data, error, loading, reload };
}

export function errorText(e: unknown): string {
  if (e instanceof GantryError) return `${e.error_message}${e.error_code && !e.error_code.startsWith('http_') ? ` (${e.error_code})` : ''}`;
  if (e instanceof Error) return e.message;
  return String(e);
}

export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {errorText(error)}
    </p>
  );
}

export function Notice({ children }: { children: ComponentChildren }) {
  return (
    <p class="notice" role="status">
      {children}
    </p>
  );
}

export function fmtTime(s: string | null | undefined): string {
  if (!s) return '—';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return s;
  return d.toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

export function Status({ value }: { value: string }) {
  return <span class={`badge badge-${value}`}>{value}</span>;
}

export function Pager({ meta, page, onPage }: { meta: { current_page: number; per_page: number; total_count: number } | undefined; page: number; onPage: (p: number) => void }) {
  if (!meta) return null;
  const pages = Math.max(1, Math.ceil(meta.total_count / meta.per_page));
  if (pages <= 1) return null;
  return (
    <nav class="pager" aria-label="Pagination">
      <button type="button" disabled={page <= 1} onClick={() => onPage(page - 1)}>
        Previous
      </button>
      <span>
        Page {page} of {pages}
      </span>
      <button type="button" disabled={page >= pages} onClick={() => onPage(page + 1)}>
        Next
      </button>
    </nav>
  );
}

/** An action button that disables itself while its promise runs and reports a failure. */
export function useAction(): { busy: boolean; error: unknown; run: (fn: () => Promise<unknown>) => Promise<boolean>; setError: (e: unknown) => void } {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const run = useCallback(async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    try {
      await fn();
      return true;
    } catch (e) {
      setError(e);
      return false;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run, setError };
}

/** A short form of an id: the last 8 characters (UUIDv7s made close in time share their first ones). */
export function short(id: string | null | undefined): string {
  return id ? id.slice(-8) : '—';
}

/** A column of a DataTable: its header and what a row shows in it. */
export interface Column<T> {
  header: string;
  /** the header is for screen readers only (an actions column) */
  srOnly?: boolean;
  /** a class for the column's cells (e.g. `wrap`) */
  class?: string;
  cell: (row: T) => ComponentChildren;
}

/**
 * A table in its horizontal scroll container, with `<th scope="col">` headers and an optional
 * visually hidden caption. `rows` undefined (still loading) renders nothing; an empty `rows` renders
 * `empty` when given, else the table with an empty body.
 */
export function DataTable<T>({ caption, columns, rows, rowKey, rowAttrs, empty, live }: {
  caption?: string;
  columns: Array<Column<T>>;
  rows: T[] | undefined;
  rowKey: (row: T) => string;
  /** extra attributes of a row's `<tr>`, e.g. `{ 'data-agent': name }` for tests */
  rowAttrs?: (row: T) => Record<`data-${string}`, string>;
  empty?: ComponentChildren;
  /** announce changes to the table politely (a live list) */
  live?: boolean;
}) {
  if (!rows) return null;
  if (rows.length === 0 && empty !== undefined) return <>{empty}</>;
  return (
    <div class="scroll">
      <table aria-live={live ? 'polite' : undefined}>
        {caption ? <caption class="sr-only">{caption}</caption> : null}
        <thead>
          <tr>
            {columns.map((c) => (
              <th key={c.header} scope="col">
                {c.srOnly ? <span class="sr-only">{c.header}</span> : c.header}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={rowKey(r)} {...rowAttrs?.(r)}>
              {columns.map((c) => (
                <td key={c.header} class={c.class}>
                  {c.cell(r)}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
