/**
 * The tools around runs: list_agents, create_upload, and the container service tools
 * (list_container_services, get_container_service, get_container_openapi,
 * invoke_container_service). Calls into a service go through the gateway (ContainerUseCases).
 */
import { z } from 'zod';
import { INVOKE_METHODS } from '../app/containers.js';
import { guarded, hygiene, page, pageMeta, pageOf, readOnly, structured, toolError, type ToolContext } from './tool-kit.js';
import * as V from '../app/views.js';

const slugArg = z.string().min(1).max(100).describe('The container service slug (from list_container_services).');

export function registerServiceTools(t: ToolContext): void {
  const { server, d, p } = t;

  server.registerTool(
    'list_agents',
    {
      title: 'List agents',
      description: "The team's GPU agents (the machines that run tasks): status (online, busy, draining, offline), GPU type, VRAM in GB, labels, and reduced system stats.",
      inputSchema: page,
      outputSchema: { agent_list: z.array(V.Agent), page_meta: pageMeta },
      annotations: readOnly,
    },
    guarded(t, 'list_agents', async (a) => structured(await d.agents.listAgents(p, pageOf(a), p.kind === 'integration'))),
  );

  server.registerTool(
    'create_upload',
    {
      title: 'Create an upload',
      description:
        'Stages an input file for a run (an image for an img2img workflow, a video for nerfstudio...). Returns the presign triple: file_key (pass it as the value of a file parameter), upload_url and upload_headers (PUT the file bytes there with exactly those headers, before the URL expires at upload_expires_at). Staged files are kept for one day.',
      inputSchema: {
        file_name: z.string().min(1).max(255).describe('The file name, e.g. photo.png.'),
        file_size: z.number().int().min(1).describe('The exact size of the file in bytes.'),
        content_type: z.string().min(1).max(255).describe('The MIME type, e.g. image/png.'),
      },
      outputSchema: { ...V.PresignedUpload.shape, upload_expires_at: z.string().nullable(), expires_at: z.string() },
      annotations: { openWorldHint: false },
    },
    guarded(t, 'create_upload', async (a) => {
      hygiene({}, a);
      return structured(await d.uploads.createUpload(p, a));
    }),
  );

  server.registerTool(
    'list_container_services',
    {
      title: 'List container services',
      description: "The team's container services (long-running HTTP services on the GPU agents, or external APIs): slug, status (only running services answer), and openapi_url when the service publishes an OpenAPI document. Call them with invoke_container_service.",
      inputSchema: page,
      outputSchema: { container_list: z.array(V.ContainerService), page_meta: pageMeta },
      annotations: readOnly,
    },
    guarded(t, 'list_container_services', async (a) => structured(await d.containers.listServices(p, pageOf(a)))),
  );

  server.registerTool(
    'get_container_service',
    {
      title: 'Get a container service',
      description: 'One container service by slug: status, type, instances, openapi_url.',
      inputSchema: { service_slug: slugArg },
      outputSchema: V.ContainerService.shape,
      annotations: readOnly,
    },
    guarded(t, 'get_container_service', async (a) => structured(await d.containers.serviceBySlug(p, a.service_slug))),
  );

  server.registerTool(
    'get_container_openapi',
    {
      title: "Get a container service's OpenAPI document",
      description: "Fetches the service's OpenAPI document (its openapi_url, through the gateway) so you can see which paths, methods and bodies invoke_container_service can send. The service must be running.",
      inputSchema: { service_slug: slugArg },
      outputSchema: { service_slug: z.string(), openapi_url: z.string(), status_code: z.number(), openapi: z.unknown() },
      annotations: readOnly,
    },
    guarded(t, 'get_container_openapi', async (a) => structured(await d.containers.serviceOpenApi(p, a.service_slug))),
  );

  server.registerTool(
    'invoke_container_service',
    {
      title: 'Call a container service',
      description:
        "Sends one HTTP request to a running container service through the gateway (like POST /r/invoke/{slug}) and returns its status, headers and body. Give the body as body_json (sent as application/json), body_text, or body_base64 (binary), at most one. The response body is returned as body_text when it is text or JSON, else only as body_base64. Use get_container_openapi to learn the service's paths.",
      inputSchema: {
        service_slug: slugArg,
        method: z.enum(INVOKE_METHODS).describe('The HTTP method.'),
        path: z.string().min(1).max(8192).describe('The path (and query) inside the service, starting with /, e.g. /v1/generate?fast=1.'),
        headers: z.record(z.string(), z.string()).optional().describe('Request headers for the service (Gantry\'s own credential is never forwarded).'),
        body_json: z.unknown().optional().describe('A JSON body (sets content-type: application/json unless headers say otherwise).'),
        body_text: z.string().optional().describe('A text body.'),
        body_base64: z.string().optional().describe('A binary body, base64.'),
      },
      outputSchema: { status_code: z.number(), headers: z.record(z.string(), z.string()), body_text: z.string().nullable(), body_base64: z.string() },
      annotations: { openWorldHint: true },
    },
    guarded(t, 'invoke_container_service', async (a) => {
      const given = [a.body_json !== undefined, a.body_text !== undefined, a.body_base64 !== undefined].filter(Boolean).length;
      if (given > 1) return toolError('give at most one of body_json, body_text, body_base64', 'invalid_parameter');
      const headers: Record<string, string> = { ...(a.headers ?? {}) };
      let body: string | undefined = a.body_base64;
      if (a.body_json !== undefined) {
        body = Buffer.from(JSON.stringify(a.body_json)).toString('base64');
        if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
      } else if (a.body_text !== undefined) body = Buffer.from(a.body_text).toString('base64');
      const r = await d.containers.invokeService(p, a.service_slug, { method: a.method, path: a.path, headers, ...(body !== undefined ? { body_base64: body } : {}) });
      const raw = Buffer.from(r.body_base64, 'base64');
      const ct = r.headers['content-type'] ?? '';
      const textual = /^(text\/|application\/([\w.+-]*\+)?(json|xml|yaml|javascript|x-www-form-urlencoded))/i.test(ct) || (ct === '' && isUtf8(raw));
      return structured({ status_code: r.status_code, headers: r.headers, body_text: textual && isUtf8(raw) ? raw.toString('utf8') : null, body_base64: r.body_base64 });
    }),
  );
}

function isUtf8(b: Buffer): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(b);
    return true;
  } catch {
    return false;
  }
}
