import type { AuditFill, AuditNote, AuditRecorder } from '../shared/audit.js';
import { uuidv7 } from '../shared/ids.js';
import type { Database } from './db.js';
import { inTx, q as pooled, type Q } from './sql.js';
import type { AuditFilter, AuditRow } from '../domain/audit.js';

export { auditView } from '../domain/audit.js';
export type { AuditFilter, AuditRow } from '../domain/audit.js';

/** Any transaction-bound query function (the identity store's too). */
type AnyQ = (sql: string, params?: unknown[]) => Promise<unknown[]>;

/**
 * The one port every management write goes through to be audited: appends the entry with the
 * transaction's own query function, so it commits or rolls back with the change.
 */
export async function appendAudit(q: AnyQ, note: AuditNote, fill: AuditFill = {}, outcome: 'succeeded' | 'failed' = 'succeeded'): Promise<void> {
  const teamId = fill.teamId ?? note.teamId;
  if (!teamId) throw new Error(`audit ${note.action}: no team`);
  const a = note.actor;
  await q(
    `insert into audit_log (id, team_id, actor_kind, actor_user_id, actor_credential_id, action, target_type, target_id, request_id, client_ip, outcome, details, created_at)
     values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::jsonb, now())`,
    [uuidv7(), teamId, a.kind, a.userId, a.credentialId, note.action, note.targetType, fill.targetId ?? note.targetId, a.requestId, a.ip, outcome, JSON.stringify({ ...note.details, ...fill.details })],
  );
}

/** A recorder bound to a transaction: records the note (when there is one) through q; never twice. */
export function recorderOn(q: AnyQ, note: AuditNote | null | undefined): AuditRecorder {
  let done = false;
  return async (fill) => {
    if (!note || done) return;
    done = true;
    await appendAudit(q, note, fill);
  };
}

/**
 * Runs fn in one transaction with a recorder: fn calls `record()` once the change happened (a row
 * was inserted, updated or deleted); nothing is appended when fn throws or never records.
 */
export function audited<T>(db: Database, note: AuditNote | null | undefined, fn: (q: Q, record: AuditRecorder) => Promise<T>): Promise<T> {
  return inTx(db, (q) => fn(q, recorderOn(q, note)));
}

/** Reads (team-scoped) and retention of the audit log. */
export class AuditStore {
  private readonly q: Q;
  constructor(private readonly db: Database) {
    this.q = pooled(db);
  }

  async list(teamId: string, f: AuditFilter, limit: number, offset: number): Promise<{ rows: AuditRow[]; total: number }> {
    const where = ['team_id = ?'];
    const params: unknown[] = [teamId];
    if (f.action) {
      // `workflow.` (a trailing dot) matches every action of that resource
      if (f.action.endsWith('.')) {
        where.push('starts_with(action, ?)');
        params.push(f.action);
      } else {
        where.push('action = ?');
        params.push(f.action);
      }
    }
    if (f.actor) {
      where.push('(actor_user_id = ?::uuid or actor_credential_id = ?::uuid)');
      params.push(f.actor, f.actor);
    }
    if (f.targetType) {
      where.push('target_type = ?');
      params.push(f.targetType);
    }
    if (f.targetId) {
      where.push('target_id = ?');
      params.push(f.targetId);
    }
    if (f.since) {
      where.push('created_at >= ?');
      params.push(f.since);
    }
    if (f.until) {
      where.push('created_at < ?');
      params.push(f.until);
    }
    const w = where.join(' and ');
    const rows = await this.q<AuditRow>(`select * from audit_log where ${w} order by created_at desc, id desc limit ${Math.floor(limit)} offset ${Math.floor(offset)}`, params);
    const total = (await this.q<{ n: number }>(`select count(*)::int as n from audit_log where ${w}`, params))[0]?.n ?? 0;
    return { rows, total };
  }

  /** Retention: deletes entries older than `before`, in batches; returns how many went. */
  async sweep(before: Date, batch = 5_000): Promise<number> {
    let total = 0;
    for (;;) {
      const r = await this.q(`delete from audit_log where id in (select id from audit_log where created_at < ? limit ${Math.floor(batch)}) returning id`, [before]);
      total += r.length;
      if (r.length < batch) return total;
    }
  }

  /** Appends one entry on its own (autocommit): for changes committed by an actor's own write (see docs). */
  async appendAlone(note: AuditNote, fill?: AuditFill): Promise<void> {
    await appendAudit(this.q, note, fill);
  }
}

/**
 * Retention (GANTRY_AUDIT_RETENTION_DAYS): one timer deleting entries older than the retention,
 * hourly (a first pass shortly after start). A cluster-wide singleton job (held under a lease).
 */
export class AuditRetention {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> | null = null;

  constructor(
    private readonly o: { store: AuditStore; retentionDays: number; now: () => number; intervalMs?: number; onError: (e: unknown) => void; onSwept?: (n: number) => void },
  ) {}

  /** One pass: entries created before now - retention go; returns how many. */
  async sweepOnce(): Promise<number> {
    if (this.o.retentionDays <= 0) return 0;
    const n = await this.o.store.sweep(new Date(this.o.now() - this.o.retentionDays * 86_400_000));
    if (n > 0) this.o.onSwept?.(n);
    return n;
  }

  start(): void {
    if (this.o.retentionDays <= 0 || this.timer) return;
    const run = (delay: number): void => {
      this.timer = setTimeout(() => {
        this.running = this.sweepOnce()
          .catch((e: unknown) => this.o.onError(e))
          .finally(() => {
            if (this.timer) run(this.o.intervalMs ?? 3_600_000);
          });
      }, delay);
      this.timer.unref();
    };
    run(Math.min(this.o.intervalMs ?? 3_600_000, 10_000));
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }
}
