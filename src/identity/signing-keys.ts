/**
 * Token signing keys shared by every node through PostgreSQL (table signing_keys), so that a
 * cluster's nodes agree on them without an operator copying a PEM around.
 *
 * - Each key is an Ed25519 pair; the private half is stored encrypted (AES-256-GCM, random nonce)
 *   with a key derived (HKDF-SHA256) from the deployment's secret GANTRY_SECRET_KEY. A node whose
 *   secret cannot decrypt the stored keys refuses to start, naming the variable.
 * - Tokens carry the key id (`kid`). The newest key signs; every key younger than rotation + grace
 *   verifies. A token whose kid is unknown makes the node re-read the table (at most once a second),
 *   so a key rotated on one node verifies on the others at once.
 * - Rotation: when the newest key is older than GANTRY_JWT_ROTATE_DAYS, a node inserts a new one;
 *   the previous key stays verifiable for the grace period (at least two access-token lifetimes).
 * - An install from before (a PEM in <dataDir>/jwt-ed25519.pem) is imported as the first key, so its
 *   tokens keep verifying; GANTRY_JWT_PRIVATE_KEY bypasses all of this (the keyring is not used).
 */
import { createCipheriv, createDecipheriv, createPrivateKey, createPublicKey, generateKeyPairSync, hkdfSync, randomBytes, type KeyObject } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { JWT_KEY_FILE, kidOf, type SigningKeyRing } from './tokens.js';

export interface SigningKeyStore {
  execute<T = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<T[]>;
}

interface Row {
  kid: string;
  private_enc: string;
  created_at: Date | string;
}

interface Key {
  kid: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
  createdAt: number;
}

const SECRET_FILE = 'secret.key';

/** The deployment secret: GANTRY_SECRET_KEY, else (single node) one generated once in the data dir. */
export function deploymentSecret(configured: string | undefined, dataDir: string, logger: Logger): string {
  if (configured) return configured;
  const file = join(dataDir, SECRET_FILE);
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  const fresh = randomBytes(32).toString('base64url');
  try {
    writeFileSync(file, fresh, { mode: 0o600, flag: 'wx' });
    chmodSync(file, 0o600);
    logger.info({ file }, 'generated the deployment secret (a cluster needs GANTRY_SECRET_KEY set to the same value on every node)');
    return fresh;
  } catch {
    return readFileSync(file, 'utf8').trim();
  }
}

function wrapKey(secret: string): Buffer {
  return Buffer.from(hkdfSync('sha256', Buffer.from(secret, 'utf8'), Buffer.from('gantry'), Buffer.from('jwt-signing-keys v1'), 32));
}

function encrypt(secret: string, pem: string): string {
  const nonce = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', wrapKey(secret), nonce);
  const body = Buffer.concat([c.update(pem, 'utf8'), c.final()]);
  return ['v1', nonce.toString('base64url'), body.toString('base64url'), c.getAuthTag().toString('base64url')].join('.');
}

function decrypt(secret: string, blob: string): string {
  const [v, nonce, body, tag] = blob.split('.');
  if (v !== 'v1' || !nonce || !body || !tag) throw new Error('unknown key encoding');
  const d = createDecipheriv('aes-256-gcm', wrapKey(secret), Buffer.from(nonce, 'base64url'));
  d.setAuthTag(Buffer.from(tag, 'base64url'));
  return Buffer.concat([d.update(Buffer.from(body, 'base64url')), d.final()]).toString('utf8');
}

export interface PgSigningKeysOptions {
  db: SigningKeyStore;
  secret: string;
  dataDir: string;
  /** Rotate the signing key after this many days (0 = never). */
  rotateDays: number;
  /** Access-token lifetime: a retired key verifies for at least twice this. */
  accessTokenTtlS: number;
  logger: Logger;
  now?: () => number;
}

export class PgSigningKeys implements SigningKeyRing {
  private keys: Key[] = [];
  private lastReload = 0;
  private reloading: Promise<void> | null = null;
  private readonly now: () => number;

  private constructor(private readonly o: PgSigningKeysOptions) {
    this.now = o.now ?? Date.now;
  }

  /** Loads the keys (creating or importing the first one), and rotates when due. */
  static async open(o: PgSigningKeysOptions): Promise<PgSigningKeys> {
    const ring = new PgSigningKeys(o);
    await ring.reload();
    if (ring.keys.length === 0) {
      const legacy = join(o.dataDir, JWT_KEY_FILE);
      if (existsSync(legacy)) {
        await ring.insert(createPrivateKey(readFileSync(legacy, 'utf8')), 0);
        o.logger.info({ file: legacy }, 'imported the existing JWT signing key into PostgreSQL (its tokens keep verifying)');
      } else await ring.insert(generateKeyPairSync('ed25519').privateKey, 0);
      await ring.reload();
    }
    await ring.rotateIfDue();
    return ring;
  }

  private async insert(privateKey: KeyObject, notBeforeMs: number): Promise<void> {
    const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const kid = kidOf(createPublicKey(privateKey));
    // several nodes starting (or rotating) at once: only one new key wins when one was made in the window
    await this.o.db.execute(
      `insert into signing_keys (kid, private_enc, created_at)
       select ?, ?, now() where not exists (select 1 from signing_keys where created_at > now() - (? * interval '1 millisecond'))
       on conflict (kid) do nothing`,
      [kid, encrypt(this.o.secret, pem), notBeforeMs],
    );
  }

  /** Re-reads the table: keys still verifiable (younger than rotation + grace), newest first. */
  async reload(): Promise<void> {
    const rows = await this.o.db.execute<Row>(`select kid, private_enc, created_at from signing_keys order by created_at desc, kid desc`);
    const keys: Key[] = [];
    for (const r of rows) {
      let pem: string;
      try {
        pem = decrypt(this.o.secret, r.private_enc);
      } catch {
        throw new ConfigError('invalid configuration: GANTRY_SECRET_KEY cannot decrypt the token signing keys stored in the database (every node of a cluster needs the same secret)');
      }
      const privateKey = createPrivateKey(pem);
      keys.push({ kid: r.kid, privateKey, publicKey: createPublicKey(privateKey), createdAt: new Date(r.created_at).getTime() });
    }
    const keep = this.verifyWindowMs();
    // the newest key always; older ones while they may still have unexpired tokens out there
    this.keys = keys.filter((k, i) => i === 0 || keep === 0 || this.now() - (keys[i - 1] as Key).createdAt < keep);
    this.lastReload = this.now();
  }

  /** How long a key verifies after the next one replaced it: two token lifetimes (at least a minute). */
  private verifyWindowMs(): number {
    return Math.max(60_000, 2 * this.o.accessTokenTtlS * 1000);
  }

  /** Inserts a new signing key when the newest is older than the rotation period. */
  async rotateIfDue(): Promise<boolean> {
    if (this.o.rotateDays <= 0) return false;
    const newest = this.keys[0];
    if (newest && this.now() - newest.createdAt < this.o.rotateDays * 86_400_000) return false;
    // several nodes find it due at once: a key made by another in the last minute counts
    await this.rotate(60_000);
    return true;
  }

  /** A new signing key now (the previous one keeps verifying through the grace period); skipped when one was made within `unlessNewerThanMs`. */
  async rotate(unlessNewerThanMs = 0): Promise<void> {
    await this.insert(generateKeyPairSync('ed25519').privateKey, unlessNewerThanMs);
    await this.reload();
    this.o.logger.info({ kid: this.keys[0]?.kid }, 'rotated the JWT signing key');
  }

  active(): { kid: string; privateKey: KeyObject } {
    const k = this.keys[0];
    if (!k) throw new Error('no signing key loaded');
    return { kid: k.kid, privateKey: k.privateKey };
  }

  /** Known kids (tests, metrics). */
  kids(): string[] {
    return this.keys.map((k) => k.kid);
  }

  async publicKey(kid: string | undefined): Promise<KeyObject | null> {
    const find = (): KeyObject | null => (kid === undefined ? (this.keys[this.keys.length - 1]?.publicKey ?? null) : (this.keys.find((k) => k.kid === kid)?.publicKey ?? null));
    const hit = find();
    if (hit || kid === undefined) return hit;
    // a key rotated on another node: read the table again (at most once a second)
    if (this.now() - this.lastReload >= 1000) {
      this.reloading ??= this.reload().finally(() => (this.reloading = null));
      await this.reloading.catch(() => undefined);
    }
    return find();
  }
}
