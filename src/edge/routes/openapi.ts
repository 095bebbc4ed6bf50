/**
 * GET /api/v1/openapi.json: the OpenAPI 3.1 document of this node, built from the live route table
 * (src/edge/openapi/build.ts) once, on the first request after every route was added.
 * GET /docs: the API reference (Scalar's standalone browser bundle from the @scalar/api-reference
 * npm package, served by the node itself at /docs/scalar.js: no CDN).
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import type { RouteDef } from '../http.js';
import { buildOpenApi } from '../openapi/build.js';

export interface OpenApiRouteDeps {
  routes: () => ReadonlyArray<RouteDef>;
  basePath: string;
  version: string;
}

/**
 * Offline: no fonts from Scalar's font host (the system fonts instead), no button or link to its
 * hosted services (API client app, developer tools, the request proxy): /docs requests nothing but
 * this node (test/console/docs-pair.browser.test.ts).
 */
const SCALAR_CONFIG = JSON.stringify({
  withDefaultFonts: false,
  hideClientButton: true,
  showDeveloperTools: 'never',
  hideDarkModeToggle: false,
  proxyUrl: '',
  telemetry: false,
  agent: { disabled: true },
  mcp: { disabled: true },
  // the renderer's own promotion link (to its hosted product) is not shown
  customCss: 'a[href^="https://www.scalar.com"]{display:none !important}',
});

const PAGE = (specUrl: string): string => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Gantry API reference</title>
</head>
<body>
<script id="api-reference" data-url="${specUrl}" data-configuration='${SCALAR_CONFIG}'></script>
<script src="/docs/scalar.js"></script>
</body>
</html>
`;

export function openApiRoutes(d: OpenApiRouteDeps): RouteDef[] {
  let doc: string | null = null;
  let bundle: Promise<Buffer> | null = null;
  const specUrl = `${d.basePath}/openapi.json`;
  return [
    {
      method: 'GET',
      path: '/openapi.json',
      auth: { kinds: 'public' },
      tag: 'docs',
      doc: { summary: 'This OpenAPI 3.1 document', tags: ['docs'], responses: { 200: { description: 'The document', schema: z.record(z.string(), z.unknown()) } } },
      stream: async (_c, res) => {
        doc ??= JSON.stringify(buildOpenApi(d.routes(), { basePath: d.basePath, version: d.version }));
        res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache' });
        res.end(doc);
      },
    },
    {
      method: 'GET',
      path: '/docs',
      absolute: true,
      auth: { kinds: 'public' },
      tag: 'docs',
      doc: { summary: 'API reference (HTML, rendered by Scalar)', tags: ['docs'], responses: { 200: { contentType: 'text/html' } } },
      stream: async (_c, res) => {
        res.writeHead(200, {
          'Content-Type': 'text/html; charset=utf-8',
          'Cache-Control': 'no-cache',
          'X-Content-Type-Options': 'nosniff',
          'Referrer-Policy': 'no-referrer',
        });
        res.end(PAGE(specUrl));
      },
    },
    {
      method: 'GET',
      path: '/docs/scalar.js',
      absolute: true,
      auth: { kinds: 'public' },
      tag: 'docs',
      doc: { summary: 'The reference page\'s script (Scalar standalone bundle)', tags: ['docs'], responses: { 200: { contentType: 'text/javascript' } } },
      stream: async (_c, res) => {
        bundle ??= readFile(join(dirname(createRequire(import.meta.url).resolve('@scalar/api-reference')), 'browser', 'standalone.js')).catch((e: unknown) => {
          bundle = null;
          throw e;
        });
        const body = await bundle;
        res.writeHead(200, { 'Content-Type': 'text/javascript; charset=utf-8', 'Cache-Control': 'public, max-age=3600', 'X-Content-Type-Options': 'nosniff' });
        res.end(body);
      },
    },
  ];
}
