/** Response body chunks from the tunnel, consumed by one reader; credit goes back as they are taken. */
export class ChunkQueue {
  private chunks: Buffer[] = [];
  private ended = false;
  private error: Error | null = null;
  private waiter: (() => void) | null = null;

  get failed(): boolean {
    return this.error !== null;
  }

  push(c: Buffer): void {
    this.chunks.push(c);
    this.wake();
  }

  end(): void {
    this.ended = true;
    this.wake();
  }

  fail(e: Error): void {
    this.error = e;
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  async *iterable(credit: (n: number) => void): AsyncIterable<Buffer> {
    for (;;) {
      if (this.chunks.length) {
        const c = this.chunks.shift() as Buffer;
        yield c;
        credit(c.length);
        continue;
      }
      if (this.error) throw this.error;
      if (this.ended) return;
      await new Promise<void>((r) => (this.waiter = r));
    }
  }
}
