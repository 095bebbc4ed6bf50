/**
 * The app layer's ContainerInvoker over the gateway's structured call (POST /r/invoke/{slug}): the
 * call is handed to the gateway's own invoke handler with the caller's principal, so its
 * validation (method, path, headers, base64 body), routing, instance choice and response cap apply
 * unchanged. The edge's input hygiene, which an HTTP request gets before any handler, is applied
 * here first (the MCP transport parsed the JSON, not the edge).
 */
import type { ContainerInvoker, InvokeResult } from '../../app/containers.js';
import type { Logger } from '../../shared/logger.js';
import { checkJsonValue, checkPairs } from '../../shared/input-hygiene.js';
import type { Ctx } from '../http.js';
import * as D from '../openapi/schemas.js';
import type { Gateway } from './gateway.js';

const EMPTY = Buffer.alloc(0);

export function gatewayInvoker(gateway: Pick<Gateway, 'invoke'>, basePath: string, logger: Logger): ContainerInvoker {
  return {
    async invoke(p, slug, req, requestId): Promise<InvokeResult> {
      const params = { serviceSlug: slug };
      const bad = checkPairs(Object.entries(params), 'path parameter') ?? checkJsonValue(req);
      if (bad) throw bad;
      let log: Logger | null = null;
      const ctx: Ctx = {
        method: 'POST',
        path: `${basePath}/r/invoke/${encodeURIComponent(slug)}`,
        rawQuery: '',
        params,
        query: new URLSearchParams(),
        headers: {},
        ip: '',
        requestId,
        get log(): Logger {
          return (log ??= logger.child({ request_id: requestId, via: 'mcp' }));
        },
        principal: p,
        body: req,
        rawBody: EMPTY,
      };
      return D.InvokeResult.parse(await gateway.invoke(ctx));
    },
  };
}
