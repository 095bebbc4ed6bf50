/**
 * Single sign-on (OpenID Connect), docs/api.md "Single sign-on". Public routes: the login itself
 * is the authentication.
 *
 *   GET  /auth/oidc/{providerId}/start      ?return_to=  302 to the provider (+ the binding cookie)
 *   GET  /auth/oidc/{providerId}/callback   the provider's redirect: 302 to return_to?sso_code=...
 *                                           (or ?sso_error=...), or 200 {sso_code, expires_in} without return_to
 *   POST /auth/oidc/exchange                {sso_code} -> {access_token, refresh_token, token_type, expires_in}
 *
 * The use cases are src/app/identity.ts (SsoUseCases); the login itself is src/identity/oidc.ts.
 */
import { z } from 'zod';
import { fromZodIssues, isAppError } from '../../shared/errors.js';
import { OidcFailure, OIDC_CODE_TTL_S } from '../../identity/oidc.js';
import type { SsoUseCases } from '../../app/identity.js';
import { Reply, type RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { parseBody } from '../params.js';

const PUBLIC: RouteAuth = { kinds: 'public' };

/** Query of GET /auth/oidc/{providerId}/start. */
export const OidcStartQuery = z.object({
  /** Where the callback sends the browser with ?sso_code= (this server's origin, or a loopback URL for a CLI). */
  return_to: z.url().max(2048).optional(),
});

/** Response of the callback when the login started without return_to. */
export const OidcCallbackResponse = z.object({ sso_code: z.string(), expires_in: z.number().int() });

/** Body of POST /auth/oidc/exchange. */
export const OidcExchangeBody = z.strictObject({ sso_code: z.string().min(1).max(512) });

/** Response of POST /auth/oidc/exchange (the same token pair as POST /auth/login). */
export const OidcExchangeResponse = z.object({ access_token: z.string(), refresh_token: z.string(), token_type: z.literal('Bearer'), expires_in: z.number().int() });

const withParams = (base: string, params: Record<string, string>): string => {
  const u = new URL(base);
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
  return u.toString();
};

const NO_STORE = { 'Cache-Control': 'no-store', 'Referrer-Policy': 'no-referrer' };

export function oidcRoutes(d: { sso: SsoUseCases; secureCookies: () => boolean }): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/auth/oidc/{providerId}/start',
      auth: PUBLIC,
      doc: { summary: 'Start an OpenID Connect login (302 to the provider)', tags: ['auth'], query: OidcStartQuery, responses: { 302: { description: "Redirect to the provider's authorization endpoint; sets the binding cookie", headers: { Location: "the provider's authorization URL", 'Set-Cookie': 'the HttpOnly binding cookie' } } }, errors: [400, 404, 429, 502] },
      handler: async (c) => {
        const q = OidcStartQuery.safeParse(Object.fromEntries(c.query));
        if (!q.success) throw fromZodIssues(q.error.issues);
        const r = await d.sso.start(c.ip, c.params.providerId ?? '', q.data.return_to ?? null);
        const cookie = `${r.cookieName}=${r.binding}; Path=/api/v1/auth/oidc/; Max-Age=${r.maxAgeS}; HttpOnly; SameSite=Lax${d.secureCookies() ? '; Secure' : ''}`;
        return new Reply(302, undefined, { Location: r.location, 'Set-Cookie': cookie, ...NO_STORE });
      },
    },
    {
      method: 'GET',
      path: '/auth/oidc/{providerId}/callback',
      auth: PUBLIC,
      doc: { summary: "The provider's redirect back: a one-time sso_code (JSON, or 302 to return_to)", tags: ['auth'], responses: { 200: OidcCallbackResponse, 302: { description: 'Redirect to return_to with sso_code (or sso_error)', headers: { Location: 'return_to?sso_code=...' } } }, errors: [400, 401, 403, 404, 409, 502] },
      handler: async (c) => {
        try {
          const r = await d.sso.callback(c.params.providerId ?? '', c.rawQuery, c.headers.cookie, { requestId: c.requestId, ip: c.ip });
          c.log.info({ provider: c.params.providerId, user_id: r.userId, user_created: r.created }, 'single sign-on login');
          if (r.returnTo) return new Reply(302, undefined, { Location: withParams(r.returnTo, { sso_code: r.code }), ...NO_STORE });
          return new Reply(200, { sso_code: r.code, expires_in: OIDC_CODE_TTL_S }, NO_STORE);
        } catch (e) {
          if (e instanceof OidcFailure) {
            c.log.info({ provider: c.params.providerId, error_code: e.error.code }, 'single sign-on login refused');
            return new Reply(302, undefined, { Location: withParams(e.returnTo, { sso_error: e.error.code }), ...NO_STORE });
          }
          if (isAppError(e)) c.log.info({ provider: c.params.providerId, error_code: e.code }, 'single sign-on login refused');
          throw e;
        }
      },
    },
    {
      method: 'POST',
      path: '/auth/oidc/exchange',
      auth: PUBLIC,
      doc: { summary: 'Exchange a one-time sso_code for the token pair', tags: ['auth'], body: OidcExchangeBody, responses: { 200: OidcExchangeResponse }, errors: [401, 429] },
      handler: async (c) => {
        return d.sso.exchange(c.ip, parseBody(OidcExchangeBody, c.body).sso_code);
      },
    },
  ];
}
