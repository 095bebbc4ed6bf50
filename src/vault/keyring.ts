/**
 * The credential vault's keyring: AES-256-GCM encryption at rest with key ids and rotation.
 *
 * - Keys come from GANTRY_VAULT_KEYS (`kid1:base64key32,kid2:base64key32`): the first key is the
 *   active one (every new encryption uses it); the others only decrypt (rows written before a
 *   rotation, until `VaultStore.rotate()` re-encrypted them).
 * - Without GANTRY_VAULT_KEYS the key is derived from the deployment secret (HKDF-SHA256, info
 *   `gantry-vault-v1`) under the key id `d0`. That derived key stays available for decryption when
 *   GANTRY_VAULT_KEYS is set later, so a deployment moves off it with one rotation.
 * - A ciphertext is `v1.<kid>.<iv b64url>.<ct b64url>.<tag b64url>` (96-bit random IV, 128-bit
 *   tag). The additional authenticated data binds it to its owner (team id and credential id, see
 *   vaultAad): a row copied to another team or credential does not decrypt.
 *
 * Error messages name key ids and variables, never key material or plaintext.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { ConfigError } from '../shared/config.js';

/** The key id of the key derived from the deployment secret. */
export const DERIVED_KID = 'd0';
const KID = /^[A-Za-z0-9_-]{1,32}$/;
const B64 = /^[A-Za-z0-9+/_-]+={0,2}$/;
const VERSION = 'v1';

/** A vault key configuration error (GANTRY_VAULT_KEYS): start-up fails with this message. */
export class VaultConfigError extends ConfigError {
  constructor(message: string) {
    super(`invalid configuration: ${message}`);
    this.name = 'VaultConfigError';
  }
}

/**
 * A ciphertext that cannot be decrypted: `unknown_key` (its key id is not configured: a key was
 * removed from GANTRY_VAULT_KEYS before rotating), `malformed` (not a vault ciphertext),
 * `auth_failed` (tampered, wrong owner, or a different key under the same id).
 */
export class VaultDecryptError extends Error {
  constructor(
    readonly reason: 'unknown_key' | 'malformed' | 'auth_failed',
    message: string,
  ) {
    super(message);
    this.name = 'VaultDecryptError';
  }
}

/** The additional authenticated data of a vault credential: its team and its own id. */
export const vaultAad = (teamId: string, credentialId: string): string => `gantry-vault-credential\u0000${teamId.toLowerCase()}\u0000${credentialId.toLowerCase()}`;

export interface VaultKeyringConfig {
  /** GANTRY_VAULT_KEYS: `kid1:base64key32,kid2:base64key32`, first = active; empty or unset = the derived key. */
  keys?: string | undefined;
  /** The deployment secret (GANTRY_SECRET_KEY or the generated one, see deploymentSecret). */
  fallbackSecret: string;
}

export function deriveVaultKey(secret: string): Buffer {
  return Buffer.from(hkdfSync('sha256', Buffer.from(secret, 'utf8'), Buffer.alloc(0), Buffer.from('gantry-vault-v1'), 32));
}

function parseKeys(spec: string): Array<{ kid: string; key: Buffer }> {
  const out: Array<{ kid: string; key: Buffer }> = [];
  const entries = spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  entries.forEach((entry, i) => {
    const at = entry.indexOf(':');
    const where = `GANTRY_VAULT_KEYS entry ${i + 1}`;
    if (at <= 0) throw new VaultConfigError(`${where}: expected kid:base64key`);
    const kid = entry.slice(0, at).trim();
    const b64 = entry.slice(at + 1).trim();
    if (!KID.test(kid)) throw new VaultConfigError(`${where}: key id must be 1-32 letters, digits, '_' or '-'`);
    if (kid === DERIVED_KID) throw new VaultConfigError(`${where}: key id ${DERIVED_KID} is reserved for the key derived from the deployment secret`);
    if (out.some((k) => k.kid === kid)) throw new VaultConfigError(`${where}: key id ${kid} is listed twice`);
    const key = B64.test(b64) ? Buffer.from(b64.replace(/-/g, '+').replace(/_/g, '/'), 'base64') : null;
    if (!key || key.length !== 32) throw new VaultConfigError(`${where} (key id ${kid}): the key must be 32 bytes, base64-encoded (e.g. openssl rand -base64 32)${key ? `; got ${key.length} bytes` : '; not valid base64'}`);
    out.push({ kid, key });
  });
  return out;
}

export class VaultKeyring {
  private constructor(
    private readonly keys: ReadonlyMap<string, Buffer>,
    /** The key id new encryptions use. */
    readonly activeKid: string,
  ) {}

  static fromConfig(c: VaultKeyringConfig): VaultKeyring {
    if (typeof c.fallbackSecret !== 'string' || c.fallbackSecret === '') throw new VaultConfigError('the deployment secret (GANTRY_SECRET_KEY) is empty: the credential vault has no key');
    const configured = parseKeys(c.keys ?? '');
    const keys = new Map<string, Buffer>();
    for (const k of configured) keys.set(k.kid, k.key);
    // the derived key always decrypts (rows written before GANTRY_VAULT_KEYS was set)
    keys.set(DERIVED_KID, deriveVaultKey(c.fallbackSecret));
    return new VaultKeyring(keys, configured[0]?.kid ?? DERIVED_KID);
  }

  /** Key ids that decrypt (active first). */
  kids(): string[] {
    return [this.activeKid, ...[...this.keys.keys()].filter((k) => k !== this.activeKid)];
  }

  has(kid: string): boolean {
    return this.keys.has(kid);
  }

  encrypt(plaintext: string, aad: string): string {
    const key = this.keys.get(this.activeKid) as Buffer;
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', key, iv);
    c.setAAD(Buffer.from(aad, 'utf8'));
    const ct = Buffer.concat([c.update(plaintext, 'utf8'), c.final()]);
    return [VERSION, this.activeKid, iv.toString('base64url'), ct.toString('base64url'), c.getAuthTag().toString('base64url')].join('.');
  }

  decrypt(s: string, aad: string): string {
    const parts = s.split('.');
    const [v, kid, iv, ct, tag] = parts;
    if (parts.length !== 5 || v !== VERSION || !kid || !iv || ct === undefined || !tag) throw new VaultDecryptError('malformed', 'not a vault ciphertext');
    const key = this.keys.get(kid);
    if (!key) throw new VaultDecryptError('unknown_key', `vault key id ${kid} is not configured (keep it listed in GANTRY_VAULT_KEYS until the rotation re-encrypted its rows)`);
    const ivb = Buffer.from(iv, 'base64url');
    const tagb = Buffer.from(tag, 'base64url');
    if (ivb.length !== 12 || tagb.length !== 16) throw new VaultDecryptError('malformed', 'not a vault ciphertext');
    try {
      const d = createDecipheriv('aes-256-gcm', key, ivb, { authTagLength: 16 });
      d.setAAD(Buffer.from(aad, 'utf8'));
      d.setAuthTag(tagb);
      return Buffer.concat([d.update(Buffer.from(ct, 'base64url')), d.final()]).toString('utf8');
    } catch {
      throw new VaultDecryptError('auth_failed', `vault ciphertext under key id ${kid} failed authentication (tampered, moved to another owner, or a different key under that id)`);
    }
  }

  /** The key id of a ciphertext (null when it is not one). */
  static kidOf(s: string): string | null {
    const parts = s.split('.');
    return parts.length === 5 && parts[0] === VERSION && parts[1] ? parts[1] : null;
  }
}

/** The additional authenticated data of a team's cloud provider key (cloud_providers.key_enc): a row copied to another team or provider does not decrypt. */
export const cloudProviderAad = (teamId: string, providerSlug: string): string => `gantry-cloud-provider\u0000${teamId.toLowerCase()}\u0000${providerSlug}`;
