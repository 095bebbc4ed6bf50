/**
 * SQL of the credential vault (table vault_credentials). Every query takes the team id (team
 * scope in the store layer): a foreign row is simply not found. The secret is encrypted here before
 * it is written and decrypted only by resolveHeader (the one way a value leaves the store); every
 * other read selects the columns without secret_enc.
 */
import type { Database } from '../persistence/db.js';
import { iso, q, type Q } from '../persistence/sql.js';
import { conflict } from '../shared/errors.js';
import { uuidv7 } from '../shared/ids.js';
import { audited } from '../persistence/audit.js';
import type { AuditNote } from '../shared/audit.js';
import { vaultAad, type VaultKeyring } from './keyring.js';

export interface VaultCredentialRow {
  id: string;
  team_id: string;
  display_name: string;
  header_name: string;
  key_id: string;
  value_hint: string;
  created_by: string | null;
  created_at: Date;
  updated_at: Date;
}

/** The record callers see: never the value. */
export const vaultCredentialView = (r: VaultCredentialRow): Record<string, unknown> => ({
  id: r.id,
  display_name: r.display_name,
  header_name: r.header_name,
  value_hint: r.value_hint,
  key_id: r.key_id,
  created_at: iso(r.created_at),
  updated_at: iso(r.updated_at),
});

/** The last 4 characters of a secret of at least 12 characters (shorter ones show nothing). */
export const valueHint = (value: string): string => {
  const chars = [...value];
  return chars.length >= 12 ? chars.slice(-4).join('') : '';
};

const COLUMNS = 'id, team_id, display_name, header_name, key_id, value_hint, created_by, created_at, updated_at';
const NAME_CONSTRAINT = 'vault_credentials_team_name_key';

const nameTaken = (name: string) => conflict('credential_name_taken', `a vault credential named ${JSON.stringify(name)} already exists in this team`);

function isNameViolation(e: unknown): boolean {
  const err = e as { code?: unknown; constraint?: unknown } | null;
  return err?.code === '23505' && (err.constraint === undefined || err.constraint === NAME_CONSTRAINT);
}

export interface VaultCreate {
  teamId: string;
  displayName: string;
  headerName: string;
  headerValue: string;
  createdBy: string | null;
}

export interface VaultUpdate {
  displayName?: string | undefined;
  headerName?: string | undefined;
  headerValue?: string | undefined;
}

export class VaultStore {
  constructor(
    private readonly db: Database,
    readonly keyring: VaultKeyring,
    private readonly now: () => number = Date.now,
  ) {}

  private get q(): Q {
    return q(this.db);
  }

  async create(c: VaultCreate, audit?: AuditNote): Promise<string> {
    const id = uuidv7(this.now());
    const enc = this.keyring.encrypt(c.headerValue, vaultAad(c.teamId, id));
    const at = new Date(this.now());
    try {
      await audited(this.db, audit, async (tq, record) => {
        await tq(
          `insert into vault_credentials (id, team_id, display_name, header_name, secret_enc, key_id, value_hint, created_by, created_at, updated_at)
           values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          [id, c.teamId, c.displayName, c.headerName, enc, this.keyring.activeKid, valueHint(c.headerValue), c.createdBy, at, at],
        );
        await record({ targetId: id, details: { header_name: c.headerName } });
      });
    } catch (e) {
      if (isNameViolation(e)) throw nameTaken(c.displayName);
      throw e;
    }
    return id;
  }

  async list(teamId: string, limit: number, offset: number): Promise<{ rows: VaultCredentialRow[]; total: number }> {
    const rows = await this.q<VaultCredentialRow>(`select ${COLUMNS} from vault_credentials where team_id = ? order by created_at desc, id desc limit ? offset ?`, [teamId, limit, offset]);
    const n = await this.q<{ n: number }>('select count(*)::int as n from vault_credentials where team_id = ?', [teamId]);
    return { rows, total: Number(n[0]?.n ?? 0) };
  }

  async get(teamId: string, id: string): Promise<VaultCredentialRow | null> {
    return (await this.q<VaultCredentialRow>(`select ${COLUMNS} from vault_credentials where team_id = ? and id = ?`, [teamId, id]))[0] ?? null;
  }

  /** Changes the given fields (a new value is encrypted under the active key); false when the credential is not the team's. */
  async update(teamId: string, id: string, p: VaultUpdate, audit?: AuditNote): Promise<boolean> {
    const sets: string[] = ['updated_at = ?'];
    const params: unknown[] = [new Date(this.now())];
    if (p.displayName !== undefined) {
      sets.push('display_name = ?');
      params.push(p.displayName);
    }
    if (p.headerName !== undefined) {
      sets.push('header_name = ?');
      params.push(p.headerName);
    }
    if (p.headerValue !== undefined) {
      sets.push('secret_enc = ?', 'key_id = ?', 'value_hint = ?');
      params.push(this.keyring.encrypt(p.headerValue, vaultAad(teamId, id)), this.keyring.activeKid, valueHint(p.headerValue));
    }
    try {
      return await audited(this.db, audit, async (tq, record) => {
        const r = await tq(`update vault_credentials set ${sets.join(', ')} where team_id = ? and id = ? returning id`, [...params, teamId, id]);
        // never the value: only whether it changed
        if (r.length === 1) await record({ details: { value_changed: p.headerValue !== undefined } });
        return r.length === 1;
      });
    } catch (e) {
      if (isNameViolation(e)) throw nameTaken(p.displayName ?? '');
      throw e;
    }
  }

  async delete(teamId: string, id: string, audit?: AuditNote): Promise<boolean> {
    return audited(this.db, audit, async (tq, record) => {
      const ok = (await tq('delete from vault_credentials where team_id = ? and id = ? returning id', [teamId, id])).length === 1;
      if (ok) await record();
      return ok;
    });
  }

  /** The header to inject for the team's credential (decrypted), or null when the team has no such credential. */
  async resolveHeader(teamId: string, id: string): Promise<{ name: string; value: string } | null> {
    const r = (await this.q<{ header_name: string; secret_enc: string }>('select header_name, secret_enc from vault_credentials where team_id = ? and id = ?', [teamId, id]))[0];
    if (!r) return null;
    return { name: r.header_name, value: this.keyring.decrypt(r.secret_enc, vaultAad(teamId, id)) };
  }

  /**
   * Re-encrypts every row that is not under the active key (after GANTRY_VAULT_KEYS got a new first
   * key); returns the rows changed. Each row is written only if it is unchanged since it was read
   * (a concurrent update already wrote it under the active key). Safe to run on several nodes at once.
   */
  async rotate(batchSize = 200): Promise<number> {
    const active = this.keyring.activeKid;
    let changed = 0;
    let after = '00000000-0000-0000-0000-000000000000';
    for (;;) {
      const rows = await this.q<{ id: string; team_id: string; secret_enc: string }>(
        'select id, team_id, secret_enc from vault_credentials where key_id <> ? and id > ? order by id limit ?',
        [active, after, batchSize],
      );
      if (rows.length === 0) return changed;
      for (const r of rows) {
        const aad = vaultAad(r.team_id, r.id);
        const fresh = this.keyring.encrypt(this.keyring.decrypt(r.secret_enc, aad), aad);
        const u = await this.q('update vault_credentials set secret_enc = ?, key_id = ? where id = ? and secret_enc = ? returning id', [fresh, active, r.id, r.secret_enc]);
        changed += u.length;
      }
      after = (rows[rows.length - 1] as { id: string }).id;
    }
  }
}
