/**
 * Cluster-wide singleton jobs (the file sweepers, retention): a job runs on the one node holding its
 * lease. In Redis the lease is `SET key token NX PX lease`, renewed every third of the lease by a
 * compare-and-pexpire script and released by compare-and-delete; a holder that fails to renew (a
 * pause, a partition, Redis lost its data) stops its job, and another node acquires the lease once it
 * expired. A single node holds every lease at once (in memory). The jobs themselves stay safe to run
 * twice for a moment (conditional deletes, SKIP LOCKED): the lease saves work, it is not a fence.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from '../shared/logger.js';
import type { RedisConnection } from './redis.js';

export interface SingletonJob {
  start(): void;
  stop(): Promise<void> | void;
}

export interface LeasePort {
  /** Runs the job while this node holds the lease `name`; resolves the returned stop when released. */
  hold(name: string, job: SingletonJob): () => Promise<void>;
}

/** Single node: every lease is held at once. */
export class InMemoryLeases implements LeasePort {
  hold(_name: string, job: SingletonJob): () => Promise<void> {
    job.start();
    return async () => {
      await job.stop();
    };
  }
}

const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;

export class RedisLeases implements LeasePort {
  constructor(
    private readonly conn: RedisConnection,
    private readonly leaseMs: number,
    private readonly logger: Logger,
  ) {}

  /** Whether this node holds the lease now (tests). */
  readonly held = new Set<string>();

  hold(name: string, job: SingletonJob): () => Promise<void> {
    const key = `${this.conn.prefix}lease:${name}`;
    const token = randomBytes(12).toString('hex');
    let holding = false;
    let stopped = false;
    let busy = false;
    const lose = async (why: string): Promise<void> => {
      if (!holding) return;
      holding = false;
      this.held.delete(name);
      this.logger.warn({ lease: name, why }, 'lease lost: the job stops here');
      await job.stop();
    };
    const tick = async (): Promise<void> => {
      if (busy || stopped) return;
      busy = true;
      try {
        if (holding) {
          const ok = Number(await this.conn.client.eval(RENEW, { keys: [key], arguments: [token, String(this.leaseMs)] }));
          if (ok !== 1) await lose('another node holds it now');
        } else {
          const r = await this.conn.client.set(key, token, { condition: 'NX', expiration: { type: 'PX', value: this.leaseMs } });
          if (r === 'OK' && !stopped) {
            holding = true;
            this.held.add(name);
            this.logger.info({ lease: name }, 'lease acquired: the job runs on this node');
            job.start();
          }
        }
      } catch (e) {
        // Redis unreachable: the lease cannot be renewed, so another node may take it after expiry
        if (holding) await lose(`renewal failed: ${(e as Error).message}`);
      } finally {
        busy = false;
      }
    };
    const timer = setInterval(() => void tick(), Math.max(50, Math.floor(this.leaseMs / 3)));
    timer.unref();
    void tick();
    return async () => {
      stopped = true;
      clearInterval(timer);
      if (holding) {
        holding = false;
        this.held.delete(name);
        await job.stop();
        await this.conn.client.eval(RELEASE, { keys: [key], arguments: [token] }).catch(() => undefined);
      }
    };
  }
}
