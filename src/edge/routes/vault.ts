/**
 * The credential vault (docs/api.md "Credential vault"): a team's secrets that the gateway injects
 * as one header into requests to its external container services. Management auth: user JWT or
 * dk- of a team member, sk- rejected. Any member lists and reads the records (never the value);
 * creating, updating and deleting need admin. The value is write-only: no response, log line or
 * error message carries it.
 *
 *   POST   /vault/credentials                   {display_name, header_name, header_value} -> {id}
 *   GET    /vault/credentials                   {credential_list, page_meta}
 *   GET    /vault/credentials/{vaultCredentialId}    the record (value_hint, key_id; never the value)
 *   PUT    /vault/credentials/{vaultCredentialId}    any of display_name, header_name, header_value -> {id}
 *   DELETE /vault/credentials/{vaultCredentialId}    {is_success}
 *
 * The use cases are src/app/vault.ts.
 */
import { z } from 'zod';
import type { VaultUseCases } from '../../app/vault.js';
import { parsePage } from '../../shared/pagination.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { auditOf, parseBody, teamPrincipalOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';

const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const MANAGE: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };

/** RFC 9110 §5.6.2 token. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Headers the gateway owns (framing, connection management, routing): never injectable. */
const RESERVED_HEADERS = new Set(['host', 'content-length', 'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-authenticate', 'proxy-authorization', 'expect']);
/** Control characters (other than HTAB) and anything outside Latin-1 cannot travel in a header value. */
const BAD_VALUE_CHAR = /[\x00-\x08\x0a-\x1f\x7f]|[^\x00-\xff]/;

const name = z.string().trim().min(1).max(255);
const headerName = z
  .string()
  .min(1)
  .max(128)
  .refine((v) => TOKEN.test(v), 'must be a valid HTTP header name (letters, digits and !#$%&\'*+-.^_`|~)')
  .refine((v) => !RESERVED_HEADERS.has(v.toLowerCase()), `must not be a hop-by-hop or framing header (${[...RESERVED_HEADERS].join(', ')})`);
// messages never quote the value
const headerValue = z
  .string({ error: 'must be a string' })
  .min(1, 'must not be empty')
  .max(8192, 'must be at most 8192 characters')
  .refine((v) => !BAD_VALUE_CHAR.test(v), 'must not contain CR, LF, NUL, other control characters or characters outside Latin-1');

const createBody = z.object({ display_name: name, header_name: headerName, header_value: headerValue }).strict();
const updateBody = z
  .object({ display_name: name.optional(), header_name: headerName.optional(), header_value: headerValue.optional() })
  .strict()
  .refine((b) => Object.values(b).some((v) => v !== undefined), 'at least one of display_name, header_name, header_value is required');

export function vaultRoutes(vault: VaultUseCases): RouteDef[] {
  const credentialId = (c: Ctx): string => uuidParam(c, 'vaultCredentialId');
  return [
    {
      method: 'POST',
      path: '/vault/credentials',
      doc: { summary: 'Store an outbound credential (header name and value)', tags: ['vault'], body: createBody, responses: { 200: D.IdResult }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => {
        const b = parseBody(createBody, c.body);
        const r = await vault.createCredential(teamPrincipalOf(c), { displayName: b.display_name, headerName: b.header_name, headerValue: b.header_value }, auditOf(c, 'vault_credential.create', 'vault_credential'));
        c.log.info({ vault_credential_id: r.id, header_name: b.header_name }, 'vault credential created');
        return r;
      },
    },
    {
      method: 'GET',
      path: '/vault/credentials',
      doc: { summary: 'List vault credentials (never the value)', tags: ['vault'], paged: true, responses: { 200: D.pageOf('credential_list', D.VaultCredential) } },
      auth: READ,
      handler: async (c) => {
        const pg = parsePage(c.query);
        return vault.listCredentials(teamPrincipalOf(c), pg);
      },
    },
    {
      method: 'GET',
      path: '/vault/credentials/{vaultCredentialId}',
      doc: { summary: 'Get a vault credential (never the value)', tags: ['vault'], responses: { 200: D.VaultCredential } },
      auth: READ,
      handler: async (c) => vault.getCredential(teamPrincipalOf(c), credentialId(c)),
    },
    {
      method: 'PUT',
      path: '/vault/credentials/{vaultCredentialId}',
      doc: { summary: 'Update a vault credential', tags: ['vault'], body: updateBody, responses: { 200: D.IdResult } },
      auth: MANAGE,
      handler: async (c) => {
        const id = credentialId(c);
        const b = parseBody(updateBody, c.body);
        const r = await vault.updateCredential(teamPrincipalOf(c), id, { displayName: b.display_name, headerName: b.header_name, headerValue: b.header_value }, auditOf(c, 'vault_credential.update', 'vault_credential', id));
        c.log.info({ vault_credential_id: id, value_changed: b.header_value !== undefined }, 'vault credential updated');
        return r;
      },
    },
    {
      method: 'DELETE',
      path: '/vault/credentials/{vaultCredentialId}',
      doc: { summary: 'Delete a vault credential', tags: ['vault'], responses: { 200: D.Success }, errors: [409] },
      auth: MANAGE,
      handler: async (c) => {
        const id = credentialId(c);
        const r = await vault.deleteCredential(teamPrincipalOf(c), id, auditOf(c, 'vault_credential.delete', 'vault_credential', id));
        c.log.info({ vault_credential_id: id }, 'vault credential deleted');
        return r;
      },
    },
  ];
}
