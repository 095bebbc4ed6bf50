/**
 * MCP session ids that any node of a cluster can serve: the id is a signed token, not a key into
 * memory. It names the integration credential and team it was issued to and when it was issued,
 * and carries an HMAC-SHA256 over all of that with a secret every node shares (the database's
 * `mcp-session` secret). A follow-up request is served by checking the signature and that the
 * caller's credential is the one the session was issued to; nothing about the session lives in
 * any node's memory, so no affinity is needed.
 *
 * Consequences (docs/api.md "MCP"): a DELETE of the session answers 200 but cannot revoke the
 * token (it is the client's to forget); revoking the sk- ends every session of it at once (the
 * credential is checked on every request); a session lives at most SESSION_MAX_AGE_MS.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const SESSION_MAX_AGE_MS = 24 * 3600_000;

export interface SessionClaims {
  /** The integration credential's id. */
  credentialId: string;
  teamId: string;
  issuedAt: number;
}

const b64 = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

export class SessionTokens {
  constructor(
    private readonly secret: Buffer,
    private readonly now: () => number = Date.now,
  ) {}

  issue(c: Omit<SessionClaims, 'issuedAt'>): string {
    const payload = b64(JSON.stringify({ c: c.credentialId, t: c.teamId, i: this.now(), n: b64(randomBytes(9)) }));
    return `m1.${payload}.${this.sign(payload)}`;
  }

  /** The claims of a valid, unexpired token, else null (a forged, altered or foreign id). */
  verify(token: string): SessionClaims | null {
    const m = /^m1\.([A-Za-z0-9_-]{1,1024})\.([A-Za-z0-9_-]{43})$/.exec(token);
    if (!m) return null;
    const payload = m[1] as string;
    const want = Buffer.from(this.sign(payload));
    const got = Buffer.from(m[2] as string);
    if (want.length !== got.length || !timingSafeEqual(want, got)) return null;
    let j: { c?: unknown; t?: unknown; i?: unknown };
    try {
      j = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as typeof j;
    } catch {
      return null;
    }
    if (typeof j.c !== 'string' || typeof j.t !== 'string' || typeof j.i !== 'number') return null;
    if (this.now() - j.i > SESSION_MAX_AGE_MS || j.i - this.now() > 60_000) return null;
    return { credentialId: j.c, teamId: j.t, issuedAt: j.i };
  }

  private sign(payload: string): string {
    return createHmac('sha256', this.secret).update(`mcp-session:${payload}`).digest('base64url');
  }
}
