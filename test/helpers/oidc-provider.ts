/**
 * A real OpenID Connect provider for tests: `oidc-provider` (panva) on loopback, with scripted
 * logins (the interaction endpoint logs in the account named by `loginAs` and grants the requested
 * scopes: what a user clicking through a real IdP does). It sits behind a small front proxy that is
 * the issuer URL; `tamper` makes the proxy alter the ID token in the token endpoint's response:
 *   'payload': one claim changed, the signature kept (a forged token);
 *   'audience': re-signed with the provider's own key for another audience.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';
import { SignJWT, decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair, importJWK } from 'jose';

export interface TestAccount {
  email: string;
  email_verified?: boolean;
  name?: string;
  given_name?: string;
  family_name?: string;
  groups?: string[];
}

export interface TestProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  accounts: Map<string, TestAccount>;
  /** The account the next login signs in as. */
  loginAs: string;
  tamper: 'none' | 'payload' | 'audience';
  /** Registers the relying party's redirect URIs (known once the node listens), before the first request. */
  setRedirectUris(uris: string[]): void;
  stop(): Promise<void>;
}

const listen = (s: Server): Promise<number> => new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port)));
const close = (s: Server): Promise<void> => new Promise((resolve) => s.close(() => resolve()));
const readAll = async (req: IncomingMessage): Promise<Buffer> => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
};

export async function startTestProvider(): Promise<TestProvider> {
  const front = createServer();
  const frontPort = await listen(front);
  const issuer = `http://127.0.0.1:${frontPort}`;
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  const jwk = { ...(await exportJWK(privateKey)), kid: 'test-key-1', alg: 'ES256', use: 'sig' };
  const signingKey = await importJWK(jwk, 'ES256');
  const clientId = 'gantry-test';
  const clientSecret = `secret-${Math.random().toString(36).slice(2)}-${Date.now()}`;
  const accounts = new Map<string, TestAccount>();
  let redirectUris = ['http://127.0.0.1:1/unset'];
  let provider: Provider | null = null;
  let inner: Server | null = null;
  let innerPort = 0;

  const tp: TestProvider = {
    issuer,
    clientId,
    clientSecret,
    accounts,
    loginAs: '',
    tamper: 'none',
    setRedirectUris(uris) {
      redirectUris = uris;
    },
    async stop() {
      await close(front);
      if (inner) await close(inner);
    },
  };

  const build = async (): Promise<void> => {
    provider = new Provider(issuer, {
      clients: [{ client_id: clientId, client_secret: clientSecret, redirect_uris: redirectUris, grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic', id_token_signed_response_alg: 'ES256' }],
      jwks: { keys: [jwk] },
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'given_name', 'family_name'], groups: ['groups'] },
      conformIdTokenClaims: false,
      pkce: { required: () => true },
      features: { devInteractions: { enabled: false } },
      cookies: { keys: ['test-cookie-key-0123456789'] },
      interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
      findAccount: (_ctx, id) => {
        const a = accounts.get(id);
        if (!a) return undefined;
        return { accountId: id, claims: () => ({ sub: id, ...a }) };
      },
    });
    provider.proxy = true;
    const callback = provider.callback();
    inner = createServer((req, res) => {
      const p = provider as Provider;
      if (req.url?.startsWith('/interaction/')) {
        void (async () => {
          try {
            const details = await p.interactionDetails(req, res);
            if (details.prompt.name === 'login') {
              await p.interactionFinished(req, res, { login: { accountId: tp.loginAs } }, { mergeWithLastSubmission: false });
              return;
            }
            const grant = details.grantId ? await p.Grant.find(details.grantId) : new p.Grant({ accountId: details.session?.accountId as string, clientId: details.params.client_id as string });
            if (!grant) throw new Error('grant not found');
            grant.addOIDCScope(String(details.params.scope));
            const grantId = await grant.save();
            await p.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
          } catch (e) {
            res.statusCode = 500;
            res.end(String(e));
          }
        })();
        return;
      }
      void callback(req, res);
    });
    innerPort = await listen(inner);
  };

  // the front proxy: everything to the provider; the token endpoint's ID token altered on demand
  front.on('request', (req, res) => {
    void (async () => {
      if (!provider) await build();
      const body = await readAll(req);
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'host' && k !== 'content-length') headers[k] = v;
      // the provider builds its URLs from the forwarded host: the front's (the issuer's)
      headers['x-forwarded-host'] = `127.0.0.1:${frontPort}`;
      headers['x-forwarded-proto'] = 'http';
      const r = await fetch(`http://127.0.0.1:${innerPort}${req.url}`, { method: req.method, headers, body: body.length ? new Uint8Array(body) : undefined, redirect: 'manual' });
      let out = Buffer.from(await r.arrayBuffer());
      if (req.url === '/token' && r.status === 200 && tp.tamper !== 'none') {
        const j = JSON.parse(out.toString('utf8')) as { id_token: string };
        const [h, , sig] = j.id_token.split('.');
        const claims = decodeJwt(j.id_token);
        if (tp.tamper === 'payload') {
          const forged = Buffer.from(JSON.stringify({ ...claims, email: 'mallory@example.test' })).toString('base64url');
          j.id_token = `${h}.${forged}.${sig}`;
        } else {
          const header = decodeProtectedHeader(j.id_token);
          j.id_token = await new SignJWT({ ...claims, aud: 'another-client', azp: 'another-client' }).setProtectedHeader({ alg: 'ES256', kid: header.kid as string }).sign(signingKey);
        }
        out = Buffer.from(JSON.stringify(j));
      }
      const resHeaders: Array<[string, string]> = [];
      r.headers.forEach((v, k) => {
        if (k !== 'set-cookie' && k !== 'content-length' && k !== 'transfer-encoding' && k !== 'content-encoding') resHeaders.push([k, v]);
      });
      for (const c of r.headers.getSetCookie()) resHeaders.push(['set-cookie', c]);
      res.writeHead(r.status, [...resHeaders.flat(), 'content-length', String(out.length)]);
      res.end(out);
    })().catch((e: unknown) => {
      res.statusCode = 502;
      res.end(String(e));
    });
  });
  return tp;
}

/**
 * A headless browser for redirect flows: follows 30x by hand, keeps cookies per origin, and stops
 * at a URL the test wants to look at (or edit) before it is requested.
 */
export class HeadlessBrowser {
  private readonly jar = new Map<string, Map<string, string>>();

  private cookieHeader(url: URL): string | undefined {
    const c = this.jar.get(url.origin);
    if (!c || c.size === 0) return undefined;
    return [...c].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  private store(url: URL, setCookies: string[]): void {
    let c = this.jar.get(url.origin);
    if (!c) this.jar.set(url.origin, (c = new Map()));
    for (const sc of setCookies) {
      const [pair, ...attrs] = sc.split(';');
      const i = (pair ?? '').indexOf('=');
      if (i <= 0) continue;
      const name = pair!.slice(0, i).trim();
      const value = pair!.slice(i + 1).trim();
      const expired = attrs.some((a) => /^\s*max-age=0\s*$/i.test(a) || (/^\s*expires=/i.test(a) && Date.parse(a.split('=')[1] ?? '') < Date.now()));
      if (expired || value === '') c.delete(name);
      else c.set(name, value);
    }
  }

  /** One request (cookies sent and stored), no redirect followed. */
  async request(url: string, init: { method?: string; body?: string; headers?: Record<string, string> } = {}): Promise<{ status: number; location: string | null; text: string; url: string }> {
    const u = new URL(url);
    const headers: Record<string, string> = { ...(init.headers ?? {}) };
    const cookie = this.cookieHeader(u);
    if (cookie) headers.cookie = cookie;
    const r = await fetch(u, { method: init.method ?? 'GET', headers, body: init.body, redirect: 'manual' });
    this.store(u, r.headers.getSetCookie());
    const loc = r.headers.get('location');
    return { status: r.status, location: loc ? new URL(loc, u).toString() : null, text: await r.text(), url: u.toString() };
  }

  /** Follows redirects from url until a response that is not a redirect, or until stop(url) says so (that URL is returned unrequested). */
  async follow(url: string, stop: (next: string) => boolean = () => false, max = 20): Promise<{ status: number; url: string; text: string; stoppedAt?: string }> {
    let next = url;
    for (let i = 0; i < max; i++) {
      if (i > 0 && stop(next)) return { status: 0, url: next, text: '', stoppedAt: next };
      const r = await this.request(next);
      if (r.status >= 300 && r.status < 400 && r.location) {
        next = r.location;
        continue;
      }
      return { status: r.status, url: next, text: r.text };
    }
    throw new Error('too many redirects');
  }

  clear(): void {
    this.jar.clear();
  }
}
