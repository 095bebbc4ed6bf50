/**
 * The console's interim API client. It mirrors the shape of the typed SDK (packages/sdk, issue 17):
 * one client object with typed requests that throw a GantryError carrying error_code, an async
 * iterator over a task's SSE events (fetch streaming with the Authorization header, resuming with
 * Last-Event-ID), and presign + upload of input files. Every page calls the API through here, so
 * switching to the SDK is this one module.
 */

export class GantryError extends Error {
  constructor(
    readonly status: number,
    readonly error_code: string,
    readonly error_message: string,
  ) {
    super(error_message);
    this.name = 'GantryError';
  }
}

export interface Tokens {
  access_token: string;
  refresh_token: string;
}

export interface ClientOptions {
  baseUrl: string;
  /** The current tokens (null when signed out). */
  tokens: () => Tokens | null;
  /** The selected team (sent as X-Team-ID). */
  teamId: () => string | null;
  /** New tokens after a refresh, or null when the session ended. */
  onTokens: (t: Tokens | null) => void;
}

export type Query = Record<string, string | number | boolean | undefined | null>;

export interface TaskEvent {
  id: string | null;
  event: string;
  data: Record<string, any>;
}

export interface Page<T> {
  items: T[];
  page_meta: { current_page: number; per_page: number; total_count: number };
}

function qs(q?: Query): string {
  if (!q) return '';
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : '';
}

async function errorOf(res: Response): Promise<GantryError> {
  let body: any = null;
  try {
    body = await res.json();
  } catch {
    /* not JSON */
  }
  return new GantryError(res.status, typeof body?.error_code === 'string' ? body.error_code : `http_${res.status}`, typeof body?.error_message === 'string' ? body.error_message : `${res.status} ${res.statusText}`);
}

export class GantryClient {
  private refreshing: Promise<boolean> | null = null;

  constructor(private readonly o: ClientOptions) {}

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    const h: Record<string, string> = { ...extra };
    const t = this.o.tokens();
    if (t) h.Authorization = `Bearer ${t.access_token}`;
    const team = this.o.teamId();
    if (team) h['X-Team-ID'] = team;
    return h;
  }

  /** One refresh at a time; false when the refresh token no longer works (signed out). */
  private refresh(): Promise<boolean> {
    const t = this.o.tokens();
    if (!t) return Promise.resolve(false);
    this.refreshing ??= fetch(`${this.o.baseUrl}/auth/refresh`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ refresh_token: t.refresh_token }) })
      .then(async (r) => {
        if (!r.ok) {
          this.o.onTokens(null);
          return false;
        }
        const b = (await r.json()) as Tokens;
        this.o.onTokens({ access_token: b.access_token, refresh_token: b.refresh_token });
        return true;
      })
      .catch(() => false)
      .finally(() => (this.refreshing = null));
    return this.refreshing;
  }

  private async fetchAuthed(url: string, init: RequestInit & { headers?: Record<string, string> }): Promise<Response> {
    const hadToken = this.o.tokens() !== null;
    let res = await fetch(url, { ...init, headers: this.headers(init.headers) });
    if (res.status === 401 && hadToken && (await this.refresh())) res = await fetch(url, { ...init, headers: this.headers(init.headers) });
    return res;
  }

  async request<T = any>(method: string, path: string, o: { body?: unknown; query?: Query; signal?: AbortSignal } = {}): Promise<T> {
    const init: RequestInit & { headers: Record<string, string> } = { method, headers: {}, cache: 'no-store', credentials: 'omit' };
    if (o.body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(o.body);
    }
    if (o.signal) init.signal = o.signal;
    const res = await this.fetchAuthed(`${this.o.baseUrl}${path}${qs(o.query)}`, init);
    if (!res.ok) throw await errorOf(res);
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }

  get<T = any>(path: string, query?: Query, signal?: AbortSignal): Promise<T> {
    return this.request<T>('GET', path, { ...(query ? { query } : {}), ...(signal ? { signal } : {}) });
  }
  post<T = any>(path: string, body?: unknown): Promise<T> {
    return this.request<T>('POST', path, body === undefined ? {} : { body });
  }
  put<T = any>(path: string, body: unknown): Promise<T> {
    return this.request<T>('PUT', path, { body });
  }
  patch<T = any>(path: string, body?: unknown): Promise<T> {
    return this.request<T>('PATCH', path, body === undefined ? {} : { body });
  }
  del<T = any>(path: string): Promise<T> {
    return this.request<T>('DELETE', path);
  }

  /** A paginated list: `{<name>_list, page_meta}` as {items, page_meta}. */
  async list<T = any>(path: string, name: string, query: Query = {}, signal?: AbortSignal): Promise<Page<T>> {
    const b = await this.get<Record<string, any>>(path, query, signal);
    return { items: (b[`${name}_list`] ?? []) as T[], page_meta: b.page_meta };
  }

  /**
   * The task's events (GET /r/tasks/{id}/events) as an async iterator. A dropped connection is
   * resumed with Last-Event-ID; the iterator ends after the terminal event (completed, failed,
   * cancelled) or when the signal aborts.
   */
  async *taskEvents(taskId: string, o: { signal?: AbortSignal; lastEventId?: string } = {}): AsyncGenerator<TaskEvent> {
    let lastId = o.lastEventId ?? null;
    let failures = 0;
    for (;;) {
      if (o.signal?.aborted) return;
      let res: Response;
      try {
        res = await this.fetchAuthed(`${this.o.baseUrl}/r/tasks/${encodeURIComponent(taskId)}/events`, {
          method: 'GET',
          headers: { Accept: 'text/event-stream', ...(lastId ? { 'Last-Event-ID': lastId } : {}) },
          cache: 'no-store',
          credentials: 'omit',
          ...(o.signal ? { signal: o.signal } : {}),
        });
      } catch (e) {
        if (o.signal?.aborted) return;
        if (++failures > 5) throw e;
        await new Promise((r) => setTimeout(r, 1000 * failures));
        continue;
      }
      if (!res.ok || !res.body) throw await errorOf(res);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value.replace(/\r\n?/g, '\n');
          let i: number;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let id: string | null = null;
            let event = 'message';
            const data: string[] = [];
            for (const line of block.split('\n')) {
              if (line.startsWith(':')) continue;
              const c = line.indexOf(':');
              const field = c < 0 ? line : line.slice(0, c);
              const val = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
              if (field === 'id') id = val;
              else if (field === 'event') event = val;
              else if (field === 'data') data.push(val);
            }
            if (data.length === 0) continue;
            if (id !== null) lastId = id;
            failures = 0;
            let parsed: Record<string, any>;
            try {
              parsed = JSON.parse(data.join('\n')) as Record<string, any>;
            } catch {
              parsed = { message: data.join('\n') };
            }
            yield { id, event, data: parsed };
            if (event === 'completed' || event === 'failed' || event === 'cancelled') return;
          }
        }
      } catch (e) {
        if (o.signal?.aborted) return;
        if (++failures > 5) throw e;
      } finally {
        reader.releaseLock();
      }
      if (o.signal?.aborted) return;
      // the server closed without a terminal event (shutdown, slow reader): resume after the last id
      await new Promise((r) => setTimeout(r, Math.min(5000, 500 * (failures + 1))));
    }
  }

  /** Stages an input file: presign, then PUT the bytes with the signed headers. Returns the file_key. */
  async uploadFile(file: File): Promise<string> {
    const p = await this.post<{ file_key: string; upload_url: string; upload_headers: Record<string, string> }>('/r/files/presign', {
      file_name: file.name,
      file_size: file.size,
      content_type: file.type || 'application/octet-stream',
    });
    // the browser sets Content-Length itself (a forbidden header name); the others are sent verbatim
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(p.upload_headers)) if (k.toLowerCase() !== 'content-length') headers[k] = v;
    const res = await fetch(p.upload_url, { method: 'PUT', headers, body: file, credentials: 'omit' });
    if (!res.ok) throw new GantryError(res.status, 'upload_failed', `upload of ${file.name} failed: ${res.status}`);
    return p.file_key;
  }
}
