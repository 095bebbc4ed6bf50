// crypto.hash: the one-shot digest (no Hash object per call); these run on every authenticated request
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Credential values: `sk-` / `ak-` / `dk-` + 32 random bytes in base62 (43 chars) + a 6-char
 * checksum (base62 of the first 4 bytes of SHA-256 over prefix + body). The checksum lets the edge
 * reject typos and garbage without a database lookup. Only the first CREDENTIAL_PREFIX_LEN chars
 * and the SHA-256 of the whole value are stored.
 */
export type CredentialKind = 'integration' | 'agent' | 'device';

export const KIND_PREFIX: Record<CredentialKind, 'sk-' | 'ak-' | 'dk-'> = { integration: 'sk-', agent: 'ak-', device: 'dk-' };
const PREFIX_KIND: Record<string, CredentialKind> = { 'sk-': 'integration', 'ak-': 'agent', 'dk-': 'device' };

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const BODY_LEN = 43; // ceil(256 / log2(62))
const CHECK_LEN = 6; // 62^6 > 2^32
export const CREDENTIAL_PREFIX_LEN = 12;
const CREDENTIAL_RE = /^(sk-|ak-|dk-)([0-9A-Za-z]{43})([0-9A-Za-z]{6})$/;

export function base62(bytes: Uint8Array, width: number): string {
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  let out = '';
  while (n > 0n) {
    out = ALPHABET[Number(n % 62n)] + out;
    n /= 62n;
  }
  return out.padStart(width, '0');
}

/** A random opaque token (refresh, reset, verification, invitation, poll secret): 32 bytes base62. */
export function randomToken(): string {
  return base62(randomBytes(32), BODY_LEN);
}

export function sha256Hex(value: string): string {
  return hash('sha256', value, 'hex');
}

export function checksumOf(prefixAndBody: string): string {
  return base62(hash('sha256', prefixAndBody, 'buffer').subarray(0, 4), CHECK_LEN);
}

export interface GeneratedCredential {
  value: string;
  prefix: string;
  hash: string;
}

export function generateCredential(kind: CredentialKind): GeneratedCredential {
  const head = KIND_PREFIX[kind] + base62(randomBytes(32), BODY_LEN);
  const value = head + checksumOf(head);
  return { value, prefix: value.slice(0, CREDENTIAL_PREFIX_LEN), hash: sha256Hex(value) };
}

/** True when the value has a credential prefix at all (sk-, ak-, dk-), well-formed or not. */
export function hasCredentialPrefix(value: string): boolean {
  return /^(sk|ak|dk)-/.test(value);
}

/** Format only (prefix, lengths, alphabet; no checksum): the kind, or null. */
export function credentialFormat(value: string): CredentialKind | null {
  const m = CREDENTIAL_RE.exec(value);
  return m ? (PREFIX_KIND[m[1] as string] ?? null) : null;
}

/** Format and checksum only (no I/O). Returns the kind, or null for anything malformed. */
export function parseCredential(value: string): CredentialKind | null {
  const m = CREDENTIAL_RE.exec(value);
  if (!m) return null;
  const head = (m[1] as string) + (m[2] as string);
  const expected = Buffer.from(checksumOf(head));
  const got = Buffer.from(m[3] as string);
  if (!timingSafeEqual(expected, got)) return null;
  return PREFIX_KIND[m[1] as string] ?? null;
}

/** Unambiguous alphabet for user codes typed by people (no 0/O, 1/I/L, U). */
const USER_CODE_ALPHABET = 'ABCDEFGHJKMNPQRSTVWXYZ23456789';

/** 8 chars, shown as ABCD-2345. */
export function generateUserCode(): string {
  const bytes = randomBytes(8);
  let s = '';
  for (const b of bytes) s += USER_CODE_ALPHABET[b % USER_CODE_ALPHABET.length];
  return `${s.slice(0, 4)}-${s.slice(4)}`;
}

/** Accepts any case and separators (space, hyphen); null when it cannot be a code. */
export function normalizeUserCode(input: string): string | null {
  const s = input.toUpperCase().replace(/[\s-]/g, '');
  if (s.length !== 8) return null;
  for (const c of s) if (!USER_CODE_ALPHABET.includes(c)) return null;
  return `${s.slice(0, 4)}-${s.slice(4)}`;
}

/** Integration callers see member emails reduced: `j***@example.com`. */
export function maskEmail(email: string): string {
  const at = email.lastIndexOf('@');
  if (at <= 0) return '***';
  return `${email.charAt(0)}***${email.slice(at)}`;
}
