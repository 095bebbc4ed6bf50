/**
 * Invoke: one structured call to a container service (POST /r/invoke/{serviceSlug}, MCP's
 * invoke_container_service). The request schema is checked at the face that receives it; the use
 * case takes the decoded request.
 */
import { z } from 'zod';

export const INVOKE_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'] as const;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export const InvokeBody = z
  .object({
    method: z
      .string()
      .transform((m) => m.toUpperCase())
      .pipe(z.enum(INVOKE_METHODS, { message: `must be one of ${INVOKE_METHODS.join(', ')}` })),
    path: z
      .string()
      .min(1, 'is required')
      .max(8192)
      .refine((p) => p.startsWith('/'), 'must start with /')
      .refine((p) => !p.startsWith('//') && !p.startsWith('/\\'), 'must be a path, not a protocol-relative URL')
      .refine((p) => !/^\/*[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(p), 'must be a path, not an absolute URL')
      .refine((p) => !/[\x00-\x20\x7f]/.test(p), 'must not contain spaces or control characters'),
    headers: z
      .record(z.string().regex(HEADER_NAME, 'header names must be HTTP tokens'), z.string().max(16 * 1024).refine((v) => !/[\r\n\x00]/.test(v), 'header values must not contain CR, LF or NUL'))
      .optional()
      .default({}),
    body_base64: z.string().regex(BASE64, 'must be base64').optional(),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.body_base64 && (b.method === 'GET' || b.method === 'DELETE' || b.method === 'HEAD')) ctx.addIssue({ code: 'custom', message: `must be omitted for ${b.method}`, path: ['body_base64'] });
  });

/** A decoded invoke request. */
export interface InvokeRequest {
  method: (typeof INVOKE_METHODS)[number];
  /** Starts with '/', with the query. */
  path: string;
  headers: Record<string, string>;
  /** Empty when there is none. */
  body: Buffer;
}

/** The container's whole answer. */
export interface InvokeResponse {
  status: number;
  /** Lower-cased names, repeated headers joined with ', ', hop-by-hop headers left out. */
  headers: Record<string, string>;
  body: Buffer;
}

/** The request of an invoke body as the faces receive it (InvokeBody): the base64 body decoded. */
export function invokeRequestOf(b: z.output<typeof InvokeBody>): InvokeRequest {
  return { method: b.method, path: b.path, headers: b.headers, body: b.body_base64 ? Buffer.from(b.body_base64, 'base64') : Buffer.alloc(0) };
}

/** The answer as the faces return it (D.InvokeResult). */
export interface InvokeResultBody {
  status_code: number;
  headers: Record<string, string>;
  body_base64: string;
}

/** The answer as the faces return it: the body in base64. */
export function invokeResultOf(r: InvokeResponse): InvokeResultBody {
  return { status_code: r.status, headers: r.headers, body_base64: r.body.toString('base64') };
}
