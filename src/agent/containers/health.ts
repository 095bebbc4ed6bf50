/**
 * Health checks of a running instance: every intervalMs a TCP connect (healthPath '') or an HTTP
 * GET of healthPath (200-399 passes). Healthy after healthyThreshold consecutive passes,
 * unhealthy after unhealthyThreshold consecutive failures; onChange is called on changes only.
 * The state starts unhealthy and the first check runs immediately.
 */
import http from 'node:http';
import { tcpProbe } from './exec.js';

export interface HealthCheckerOptions {
  host: string;
  port: number;
  /** '' = TCP connect only. */
  healthPath: string;
  intervalMs: number;
  /** Per-check timeout (default 2000 ms, at most intervalMs is not enforced). */
  timeoutMs?: number;
  /** Consecutive passes to become healthy (default 1). */
  healthyThreshold?: number;
  /** Consecutive failures to become unhealthy (default 2). */
  unhealthyThreshold?: number;
  onChange(healthy: boolean): void;
}

/** One HTTP health check: GET http://host:port{path}, 200-399 within timeoutMs passes. */
export function httpProbe(host: string, port: number, path: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (ok: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(ok);
    };
    const req = http.get({ host, port, path: path.startsWith('/') ? path : `/${path}`, agent: false, headers: { 'user-agent': 'gantry-agent-health' } }, (res) => {
      const code = res.statusCode ?? 0;
      res.resume();
      res.on('error', () => undefined);
      done(code >= 200 && code < 400);
    });
    const timer = setTimeout(() => {
      req.destroy(new Error('health check timed out'));
      done(false);
    }, timeoutMs);
    req.on('error', () => done(false));
  });
}

export class HealthChecker {
  private healthyNow = false;
  private passes = 0;
  private failures = 0;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private readonly timeoutMs: number;
  private readonly healthyThreshold: number;
  private readonly unhealthyThreshold: number;

  constructor(private readonly o: HealthCheckerOptions) {
    this.timeoutMs = o.timeoutMs ?? 2000;
    this.healthyThreshold = Math.max(1, o.healthyThreshold ?? 1);
    this.unhealthyThreshold = Math.max(1, o.unhealthyThreshold ?? 2);
    void this.tick();
  }

  get healthy(): boolean {
    return this.healthyNow;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const { host, port, healthPath } = this.o;
    const ok = healthPath === '' ? await tcpProbe(host, port, this.timeoutMs) : await httpProbe(host, port, healthPath, this.timeoutMs);
    if (this.stopped) return;
    if (ok) {
      this.failures = 0;
      this.passes++;
      if (!this.healthyNow && this.passes >= this.healthyThreshold) this.change(true);
    } else {
      this.passes = 0;
      this.failures++;
      if (this.healthyNow && this.failures >= this.unhealthyThreshold) this.change(false);
    }
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), this.o.intervalMs);
    this.timer.unref();
  }

  private change(healthy: boolean): void {
    this.healthyNow = healthy;
    try {
      this.o.onChange(healthy);
    } catch {
      // a throwing listener must not stop the checks
    }
  }
}
