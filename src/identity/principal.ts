/**
 * Who is calling. The edge resolves it once per request (Authenticator) and every route declares
 * which principal kinds and roles it accepts, so no handler has to think about it. These types
 * belong to the identity layer (it produces principals); src/edge/principal.ts re-exports them so
 * the edge depends on identity and never the other way round.
 */
export type PrincipalKind = 'user' | 'integration' | 'agent' | 'device';
export type TeamRole = 'owner' | 'admin' | 'member';

export interface Principal {
  kind: PrincipalKind;
  userId?: string;
  /** Set for team-scoped calls: from X-Team-ID (user) or the credential (integration, agent, device). */
  teamId?: string;
  role?: TeamRole;
  credentialId?: string;
  /** JWT callers: the login session (the access token's `sid`), so what outlives the request (an SSE stream) ends with it. */
  sessionId?: string;
}

/** A principal whose team has been resolved (team-scoped routes only ever see these). */
export interface TeamPrincipal extends Principal {
  teamId: string;
}

export interface RouteAuth {
  /** 'public': no credential needed (a bad one is still ignored). */
  kinds: readonly PrincipalKind[] | 'public';
  /** Team-scoped: a JWT caller must send X-Team-ID and be a member. */
  team?: boolean;
  /** Minimum team role (owner > admin > member). */
  role?: TeamRole;
  /** Multipart upload endpoints: sk- and dk- get 401 instead of 403. */
  jwtOnly401?: boolean;
  /** The MCP endpoint: sk- only, and every other caller (JWT, dk-) gets 401 instead of 403. */
  integrationOnly401?: boolean;
}

export interface AuthRequest {
  headers: Record<string, string>;
  ip: string;
}

export interface Authenticator {
  /** Returns the principal allowed on this route, or throws the AppError the spec requires. */
  authenticate(req: AuthRequest, auth: RouteAuth): Promise<Principal | null>;
}

export const ROLE_RANK: Record<TeamRole, number> = { member: 1, admin: 2, owner: 3 };
