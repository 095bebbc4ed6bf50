/**
 * The edge's view of who is calling. The types live in the identity layer (which resolves
 * principals); this module re-exports them so routes keep importing from the edge, and the
 * dependency runs edge -> identity only.
 */
export type { PrincipalKind, TeamRole, Principal, TeamPrincipal, RouteAuth, AuthRequest, Authenticator } from '../identity/principal.js';
export { ROLE_RANK } from '../identity/principal.js';
