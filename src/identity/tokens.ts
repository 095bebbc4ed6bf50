import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { readFileSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { unauthorized } from '../shared/errors.js';
import { isUuid, uuidv7 } from '../shared/ids.js';
import type { Logger } from '../shared/logger.js';

export const JWT_KEY_FILE = 'jwt-ed25519.pem';

/**
 * The Ed25519 signing key: GANTRY_JWT_PRIVATE_KEY (PKCS8 PEM; literal `\n` escapes accepted) when
 * set, otherwise generated once and kept in <dataDir>/jwt-ed25519.pem (mode 0600). Nodes of a
 * cluster must share the key through the variable.
 */
export function loadSigningKey(pemFromConfig: string | undefined, dataDir: string, logger: Logger): KeyObject {
  let pem = pemFromConfig?.replace(/\\n/g, '\n');
  if (!pem) {
    const file = join(dataDir, JWT_KEY_FILE);
    try {
      pem = readFileSync(file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      const { privateKey } = generateKeyPairSync('ed25519');
      const fresh = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
      try {
        writeFileSync(file, fresh, { mode: 0o600, flag: 'wx' });
        logger.info({ file }, 'generated a JWT signing key (set GANTRY_JWT_PRIVATE_KEY to share one across nodes)');
        pem = fresh;
      } catch (w) {
        if ((w as NodeJS.ErrnoException).code !== 'EEXIST') throw w;
        pem = readFileSync(file, 'utf8');
      }
      chmodSync(file, 0o600);
    }
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch (e) {
    throw new Error(`GANTRY_JWT_PRIVATE_KEY: not a PKCS8 PEM private key (${(e as Error).message})`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`GANTRY_JWT_PRIVATE_KEY: must be an Ed25519 key (got ${key.asymmetricKeyType})`);
  return key;
}

/** What the JWT service needs of a keyring (signing-keys.ts implements it). */
export interface SigningKeyRing {
  active(): { kid: string; privateKey: KeyObject };
  publicKey(kid: string | undefined): Promise<KeyObject | null>;
}

/** Key id: the first 16 base64url characters of the SHA-256 of the public key (SPKI DER). */
export function kidOf(publicKey: KeyObject): string {
  return createHash('sha256').update(publicKey.export({ type: 'spki', format: 'der' })).digest('base64url').slice(0, 16);
}

export interface AccessClaims {
  userId: string;
  /** Issued-at, seconds. */
  iat: number;
  jti: string;
  /** The user's session version at issue time (`sv`); a password reset bumps it and ends every session. */
  sessionVersion: number;
  /** The session (`sid`): the refresh-token family the token was issued with; logout and reuse detection end it. */
  sessionId: string;
}

/** How far in the future an `iat` may be (clock skew between nodes); beyond it the token is refused. */
export const IAT_SKEW_S = 60;

/**
 * Access tokens: EdDSA only, issuer and audience pinned, sub = user id, short-lived; each names its
 * session (`sid`, the refresh family) and the user's session version (`sv`), which the authenticator
 * checks on every request. An `iat` more than IAT_SKEW_S in the future is refused, and so is a
 * lifetime (`exp - iat`) longer than the configured access TTL, whoever signed it.
 */
export class JwtService {
  private readonly publicKey: KeyObject;
  private readonly kid: string;

  /**
   * privateKey: the one key (GANTRY_JWT_PRIVATE_KEY, tests); o.keyring: keys shared through
   * PostgreSQL (signing-keys.ts) — the newest signs, every key still in its grace period verifies.
   */
  constructor(
    private readonly privateKey: KeyObject | null,
    private readonly o: { issuer: string; audience: string; ttlS: number; now?: () => number; keyring?: SigningKeyRing },
  ) {
    if (!privateKey && !o.keyring) throw new Error('JwtService needs a private key or a keyring');
    this.publicKey = privateKey ? createPublicKey(privateKey) : (null as unknown as KeyObject);
    this.kid = privateKey ? kidOf(this.publicKey) : '';
  }

  private signingKey(): { kid: string; privateKey: KeyObject } {
    return this.o.keyring ? this.o.keyring.active() : { kid: this.kid, privateKey: this.privateKey as KeyObject };
  }

  private async verifyKey(kid: string | undefined): Promise<KeyObject> {
    const k = this.o.keyring ? await this.o.keyring.publicKey(kid) : kid === undefined || kid === this.kid ? this.publicKey : null;
    if (!k) throw unauthorized('credential_invalid', 'invalid access token (unknown signing key)');
    return k;
  }

  get ttlS(): number {
    return this.o.ttlS;
  }

  async issue(userId: string, sessionVersion: number, sessionId: string): Promise<{ token: string; expiresIn: number }> {
    const now = Math.floor((this.o.now?.() ?? Date.now()) / 1000);
    const key = this.signingKey();
    const token = await new SignJWT({ sv: sessionVersion, sid: sessionId })
      .setProtectedHeader({ alg: 'EdDSA', typ: 'JWT', kid: key.kid })
      .setSubject(userId)
      .setIssuer(this.o.issuer)
      .setAudience(this.o.audience)
      .setIssuedAt(now)
      .setExpirationTime(now + this.o.ttlS)
      .setJti(uuidv7())
      .sign(key.privateKey);
    return { token, expiresIn: this.o.ttlS };
  }

  /** Throws 401 credential_expired / credential_invalid (a future `iat`, a lifetime beyond ttlS, a missing `sv` or `sid` included). */
  async verify(token: string): Promise<AccessClaims> {
    try {
      const { payload } = await jwtVerify(token, (header) => this.verifyKey(header.kid), {
        issuer: this.o.issuer,
        audience: this.o.audience,
        algorithms: ['EdDSA'],
        requiredClaims: ['sub', 'iat', 'exp', 'jti', 'sv', 'sid'],
        ...(this.o.now ? { currentDate: new Date(this.o.now()) } : {}),
      });
      const { sub, iat, exp, jti, sv, sid } = payload;
      if (typeof sub !== 'string' || typeof iat !== 'number' || typeof exp !== 'number' || typeof jti !== 'string' || typeof sv !== 'number' || typeof sid !== 'string' || !isUuid(sid))
        throw unauthorized('credential_invalid', 'invalid access token');
      const nowS = Math.floor((this.o.now?.() ?? Date.now()) / 1000);
      if (iat > nowS + IAT_SKEW_S) throw unauthorized('credential_invalid', 'invalid access token (issued in the future)');
      // the lifetime is ours to decide, not the token's: one signed for longer than the access TTL is refused
      if (exp - iat > this.o.ttlS) throw unauthorized('credential_invalid', 'invalid access token (lifetime longer than the access token TTL)');
      return { userId: sub, iat, jti, sessionVersion: sv, sessionId: sid.toLowerCase() };
    } catch (e) {
      if (e instanceof joseErrors.JWTExpired) throw unauthorized('credential_expired', 'access token expired; refresh it');
      if (e instanceof Error && e.name === 'AppError') throw e;
      throw unauthorized('credential_invalid', 'invalid access token');
    }
  }
}

/** Cheap shape check (three base64url segments) before any crypto. */
export const looksLikeJwt = (s: string): boolean => /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(s) && s.length < 4096;
