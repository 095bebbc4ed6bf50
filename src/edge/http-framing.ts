import type { HttpRequest } from 'uWebSockets.js';

/** Control characters other than HTAB are invalid in a field value (RFC 9110 §5.5). */
const CTL_IN_VALUE = /[\x00-\x08\x0a-\x1f\x7f]/;
/** uri-host [":" port] (RFC 9112 §3.2, RFC 3986 §3.2.2); empty is allowed. */
const HOST_VALUE = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::[0-9]*)?$/;

/**
 * The request's headers (lower-cased names; repeated ones joined with ", ", Content-Length kept
 * once) and the first framing error in them, as [error code, message], or null.
 */
export function readRequestHeaders(req: HttpRequest): { headers: Record<string, string>; framing: [code: string, message: string] | null } {
  const headers: Record<string, string> = {};
  // framing checks (RFC 9112 §3.2, §6.3; RFC 9110 §5.5): uWS passes these through to us
  let framing: [code: string, message: string] | null = null;
  let hosts = 0;
  let contentLength: string | undefined;
  req.forEach((k, v) => {
    if (CTL_IN_VALUE.test(v)) framing ??= ['invalid_header_value', `header ${k} contains a control character`];
    if (k === 'host') hosts++;
    else if (k === 'content-length') {
      if (contentLength !== undefined && contentLength !== v) framing ??= ['conflicting_content_length', 'conflicting Content-Length headers'];
      contentLength = v;
      headers[k] = v;
      return;
    }
    headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
  });
  // RFC 9112 §6.1: chunked must be the final coding, applied once; the node decodes no other coding, so
  // anything but exactly `chunked` (`chunked, identity`, `gzip, chunked`, chunked twice) is refused
  const te = headers['transfer-encoding'];
  if (te !== undefined && te.trim().toLowerCase() !== 'chunked')
    framing ??= ['invalid_transfer_encoding', 'Transfer-Encoding must be exactly "chunked" (the only coding this server decodes, once and last)'];
  if (hosts !== 1) framing ??= ['invalid_host_header', hosts === 0 ? 'missing Host header' : 'more than one Host header'];
  else if (!HOST_VALUE.test(headers.host ?? '')) framing ??= ['invalid_host_header', 'invalid Host header'];
  return { headers, framing };
}
