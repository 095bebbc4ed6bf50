import type { Config } from '../../shared/config.js';
import { Reply, type RouteDef } from '../http.js';

export interface SystemDeps {
  config: Config;
  ready: () => Promise<{ ready: boolean; checks: Record<string, boolean> }>;
}

export function systemRoutes(d: SystemDeps): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/server-info',
      auth: { kinds: 'public' },
      handler: async () => ({
        registration_enabled: d.config.GANTRY_REGISTRATION_ENABLED,
        oauth_enabled: d.config.oauthProviders.length > 0,
        oauth_providers: d.config.oauthProviders,
      }),
    },
    { method: 'GET', path: '/healthz', absolute: true, auth: { kinds: 'public' }, handler: async () => ({ status: 'ok' }) },
    {
      method: 'GET',
      path: '/readyz',
      absolute: true,
      auth: { kinds: 'public' },
      handler: async () => {
        const r = await d.ready();
        return new Reply(r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not_ready', checks: r.checks });
      },
    },
  ];
}
