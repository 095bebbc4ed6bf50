/** A bounded in-memory cache with entry ages (the auth cache's, the run gate's budget presence). */
interface Entry<V> {
  value: V;
  at: number;
}

/** A Map in least-recently-used order (a hit moves the key to the end); evicts from the front. */
export class Lru<V> {
  readonly map = new Map<string, Entry<V>>();

  constructor(
    private readonly max: number,
    private readonly onEvict: () => void = () => undefined,
  ) {}

  get(key: string, now: number, ttlMs: number): V | undefined {
    const e = this.map.get(key);
    if (!e) return undefined;
    this.map.delete(key);
    if (now - e.at >= ttlMs) return undefined;
    this.map.set(key, e);
    return e.value;
  }

  set(key: string, value: V, now: number): void {
    this.map.delete(key);
    this.map.set(key, { value, at: now });
    while (this.map.size > this.max) {
      const oldest = this.map.keys().next();
      if (oldest.done) break;
      this.map.delete(oldest.value);
      this.onEvict();
    }
  }

  delete(key: string): void {
    this.map.delete(key);
  }

  deleteWhere(pred: (key: string, v: V) => boolean): void {
    for (const [k, e] of this.map) if (pred(k, e.value)) this.map.delete(k);
  }

  clear(): void {
    this.map.clear();
  }
}
