import type { Config } from '../../shared/config.js';
import { Reply, type RouteDef } from '../http.js';
import * as D from '../openapi/schemas.js';

export interface SystemDeps {
  config: Config;
  /** The port this node's agent gRPC server listens on (the console's agent hint names it). */
  agentGrpcPort?: () => number;
  ready: () => Promise<{ ready: boolean; checks: Record<string, boolean> }>;
}

export function systemRoutes(d: SystemDeps): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/server-info',
      doc: { summary: 'Public server info', tags: ['system'], responses: { 200: D.ServerInfo } },
      auth: { kinds: 'public' },
      handler: async () => ({
        registration_enabled: d.config.GANTRY_REGISTRATION_ENABLED,
        oauth_enabled: d.config.oauthProviders.length > 0,
        oauth_providers: d.config.oauthProviders,
        ...(d.agentGrpcPort ? { agent_grpc_port: d.agentGrpcPort(), agent_grpc_tls: Boolean(d.config.GANTRY_GRPC_TLS_CERT) } : {}),
      }),
    },
    { method: 'GET', path: '/healthz', absolute: true, auth: { kinds: 'public' }, doc: { summary: 'Liveness', tags: ['system'], responses: { 200: D.Health } }, handler: async () => ({ status: 'ok' }) },
    {
      method: 'GET',
      path: '/readyz',
      doc: { summary: 'Readiness (database, cluster)', tags: ['system'], responses: { 200: D.Readiness, 503: { description: 'Not ready', schema: D.Readiness } } },
      absolute: true,
      auth: { kinds: 'public' },
      handler: async () => {
        const r = await d.ready();
        return new Reply(r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not_ready', checks: r.checks });
      },
    },
  ];
}
