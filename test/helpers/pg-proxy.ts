import { createServer, connect, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on loopback, e.g. between a node and the machine's PostgreSQL, for outage tests (the
 * shared PostgreSQL itself is never stopped):
 * - cut(): nothing listens on the port and every live connection is reset (a database restart);
 * - blackhole(): connections stay open and new ones are accepted, but no byte passes in either
 *   direction (a hung server or a partitioned network: nothing answers, nothing is refused);
 * - restore() / start(): traffic passes again (after cut(), the same port listens again).
 * A socket closed on one side closes the other, so PostgreSQL ends (and rolls back) the session of
 * a connection the node destroyed.
 */
export class PgProxy {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  private holes = false;
  port = 0;

  /**
   * hold (optional): asked for each chunk a client sends, with whether it is the connection's first;
   * true holds that connection's client->upstream bytes from then on (a request left pending until
   * its upstream goes away).
   */
  constructor(
    private readonly host: string,
    public targetPort: number,
    private readonly hold?: (chunk: Buffer, first: boolean) => boolean,
  ) {}

  async start(): Promise<void> {
    this.holes = false;
    const server = createServer((client) => {
      const upstream = connect(this.targetPort, this.host);
      this.sockets.add(client).add(upstream);
      const drop = (): void => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      let first = true;
      let held = false;
      client.on('data', (d: Buffer) => {
        if (this.hold && !held) held = this.hold(d, first);
        first = false;
        if (!this.holes && !held) upstream.write(d);
      });
      upstream.on('data', (d) => {
        if (!this.holes) client.write(d);
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    const a = server.address();
    if (a && typeof a === 'object') this.port = a.port;
    this.server = server;
  }

  /** The outage: nothing listens on the port any more and every open connection is reset. */
  async cut(): Promise<void> {
    const s = this.server;
    this.server = null;
    for (const x of this.sockets) x.destroy();
    this.sockets.clear();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  /** Nothing passes any more (bytes are dropped, not held): connections hang, none is refused. */
  blackhole(): void {
    this.holes = true;
  }

  /** Traffic passes again (connections that lost bytes meanwhile are out of step: the node must have dropped them). */
  restore(): void {
    this.holes = false;
  }

  /** Live proxied connections (client side). */
  connections(): number {
    return this.sockets.size / 2;
  }

  async stop(): Promise<void> {
    await this.cut();
  }
}
