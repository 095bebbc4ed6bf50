/**
 * Route documentation: the optional `doc` of a RouteDef (src/edge/http.ts). The OpenAPI document
 * (GET /api/v1/openapi.json, src/edge/openapi/build.ts) is generated from the live route table and
 * these zod schemas; a route without `doc` is reported by test/clients/openapi.test.ts.
 */
import type { z } from 'zod';

export interface ResponseDoc {
  description?: string;
  /** JSON body schema (application/json unless contentType says otherwise). */
  schema?: z.ZodType;
  /** Non-JSON responses: text/html, application/octet-stream, text/plain, ... */
  contentType?: string;
  /** A Server-Sent Events stream: the component schema names of each event's data, by event name. */
  sse?: Record<string, string>;
  /** Response headers worth documenting (name -> description). */
  headers?: Record<string, string>;
}

export interface RouteDoc {
  summary: string;
  description?: string;
  /** Grouping in the reference (first one wins in Scalar's sidebar). */
  tags: string[];
  /** Query parameters (each property of the object is one parameter). */
  query?: z.ZodObject;
  /** Adds current_page and per_page (the spec's pagination) to the query. */
  paged?: boolean;
  /** JSON request body. */
  body?: z.ZodType;
  /** A request body that is not JSON (the content type), e.g. an object-store PUT. */
  rawBodyType?: string;
  /** Request headers worth documenting (name -> description), e.g. Idempotency-Key, Last-Event-ID. */
  headers?: Record<string, string>;
  /** Success (and notable error) responses by status; every operation also gets the error envelope as `default`. */
  responses: Partial<Record<number, z.ZodType | ResponseDoc>>;
  /** Error statuses this route is known to answer (documented with the error envelope). */
  errors?: number[];
  /** Left out of the document (test-only debug routes). */
  hidden?: boolean;
  /** Stable operationId (default: derived from method and path). */
  operationId?: string;
}
