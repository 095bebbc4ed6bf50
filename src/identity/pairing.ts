/** Device pairing (RFC 8628 style): the device's side, started and polled without a credential. */
import { timingSafeEqual } from 'node:crypto';
import { AppError, notFound } from '../shared/errors.js';
import { uuidv7 } from '../shared/ids.js';
import { generateCredential, generateUserCode, randomToken, sha256Hex } from './credentials.js';
import type { IdentityStore } from './store.js';

export const PAIRING_TTL_S = 600;

interface PairingDeps {
  store: IdentityStore;
  pollIntervalS: number;
}

/** Starts a pairing: the user code to show, the poll secret and how long it is valid. */
export async function pairStart(d: PairingDeps, b: { device_name: string; agent_credential?: boolean | undefined }): Promise<Record<string, unknown>> {
  const now = new Date();
  const pollSecret = randomToken();
  for (let i = 0; i < 5; i++) {
    const id = uuidv7();
    const userCode = generateUserCode();
    if (await d.store.insertPairing({ id, userCode, pollSecretHash: sha256Hex(pollSecret), deviceName: b.device_name.trim(), mintAgent: b.agent_credential ?? true, expiresAt: new Date(now.getTime() + PAIRING_TTL_S * 1000), now }))
      return { pairing_id: id, user_code: userCode, poll_secret: pollSecret, expires_in: PAIRING_TTL_S, poll_interval: d.pollIntervalS };
  }
  throw new AppError('internal', 'pairing_code_exhausted', 'could not allocate a pairing code');
}

/** The device polls: pending, expired, or (once) confirmed with the credentials minted for it. */
export async function pairPoll(d: PairingDeps, b: { pairing_id: string; poll_secret: string }): Promise<Record<string, unknown>> {
  const p = await d.store.pairing(b.pairing_id);
  const secretOk = p !== null && timingSafeEqual(Buffer.from(sha256Hex(b.poll_secret)), Buffer.from(p.poll_secret_hash));
  if (!p || !secretOk) throw notFound('pairing', 'pairing_not_found');
  const now = new Date();
  const touched = await d.store.touchPoll(p.id, now, d.pollIntervalS);
  if (!touched.ok) {
    const waitS = Math.max(1, Math.ceil(d.pollIntervalS - (now.getTime() - touched.last.getTime()) / 1000));
    throw new AppError('rate_limited', 'slow_down', `poll at most every ${d.pollIntervalS} s`, { retryAfterS: waitS });
  }
  const expired = p.expires_at.getTime() <= now.getTime();
  if (p.pairing_status === 'pending') return { pairing_status: expired ? 'expired' : 'pending' };
  if (p.pairing_status === 'delivered' || expired) return { pairing_status: 'expired' };
  let minted: { dk: string; ak: string | null } | null = null;
  const delivered = await d.store.deliverPairing(p.id, now, async (q, row) => {
    if (!row.user_id || !row.team_id) throw new AppError('internal', 'pairing_incomplete', 'confirmed pairing without user or team');
    const dk = generateCredential('device');
    const base = { teamId: row.team_id, userId: row.user_id, displayName: row.device_name, linkedTo: row.id, expiresAt: null, now };
    await d.store.insertCredential({ ...base, id: uuidv7(), type: 'device', prefix: dk.prefix, hash: dk.hash }, q);
    // the agent credential only for a pairing that asked for it (the desktop app runs an agent; the CLI does not)
    let ak: string | null = null;
    if (row.mint_agent !== false) {
      const a = generateCredential('agent');
      await d.store.insertCredential({ ...base, id: uuidv7(), type: 'agent', prefix: a.prefix, hash: a.hash }, q);
      ak = a.value;
    }
    minted = { dk: dk.value, ak };
  });
  const m = minted as { dk: string; ak: string | null } | null;
  if (!delivered || !m) return { pairing_status: 'expired' };
  return { pairing_status: 'confirmed', device_credential: m.dk, ...(m.ak ? { agent_credential: m.ak } : {}), team_id: delivered.team_id };
}
