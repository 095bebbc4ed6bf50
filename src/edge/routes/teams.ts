import { z } from 'zod';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { parsePage } from '../../shared/pagination.js';
import type { IdentityService } from '../../identity/service.js';
import { parseBody, principalOf, teamPrincipalOf, uuidParam } from '../params.js';

const S = {
  team: z.strictObject({ display_name: z.string().trim().min(1).max(255) }),
  role: z.strictObject({ member_role: z.enum(['admin', 'member'], { error: 'must be admin or member (ownership changes through /teams/current/transfer)' }) }),
  invite: z.strictObject({ email_address: z.email().max(254), member_role: z.enum(['admin', 'member']).default('member') }),
  accept: z.strictObject({ invitation_token: z.string().min(1).max(512) }),
  transfer: z.strictObject({ new_owner_id: z.uuid() }),
};

const USER: RouteAuth = { kinds: ['user', 'device'] };
const team = (role: 'member' | 'admin' | 'owner'): RouteAuth => ({ kinds: ['user', 'device'], team: true, ...(role === 'member' ? {} : { role }) });

/** Teams, members, invitations and ownership transfer. Roles: owner > admin > member. */
export function teamRoutes(svc: IdentityService): RouteDef[] {
  const routes: RouteDef[] = [
    { method: 'POST', path: '/teams', auth: USER, handler: async (c) => svc.createTeam(principalOf(c), parseBody(S.team, c.body)) },
    { method: 'GET', path: '/teams', auth: USER, handler: async (c) => svc.listTeams(principalOf(c), parsePage(c.query)) },
    { method: 'GET', path: '/teams/current', auth: team('member'), handler: async (c) => svc.currentTeam(teamPrincipalOf(c)) },
    { method: 'PUT', path: '/teams/current', auth: team('admin'), handler: async (c) => svc.updateTeam(teamPrincipalOf(c), parseBody(S.team, c.body)) },
    {
      method: 'DELETE',
      path: '/teams/current',
      auth: team('owner'),
      handler: async (c) => {
        await svc.deleteTeam(teamPrincipalOf(c));
        return { is_success: true };
      },
    },
    { method: 'GET', path: '/teams/current/members', auth: team('member'), handler: async (c) => svc.members(teamPrincipalOf(c), parsePage(c.query)) },
    {
      method: 'PUT',
      path: '/teams/current/members/{userId}',
      auth: team('admin'),
      handler: async (c) => svc.setMemberRole(teamPrincipalOf(c), uuidParam(c, 'userId'), parseBody(S.role, c.body).member_role),
    },
    {
      method: 'DELETE',
      path: '/teams/current/members/{userId}',
      auth: team('member'),
      handler: async (c) => {
        await svc.removeMember(teamPrincipalOf(c), uuidParam(c, 'userId'));
        return { is_success: true };
      },
    },
    { method: 'POST', path: '/teams/current/invitations', auth: team('admin'), handler: async (c) => svc.invite(teamPrincipalOf(c), parseBody(S.invite, c.body)) },
    { method: 'GET', path: '/teams/current/invitations', auth: team('admin'), handler: async (c) => svc.invitations(teamPrincipalOf(c), parsePage(c.query)) },
    {
      method: 'DELETE',
      path: '/teams/current/invitations/{invitationId}',
      auth: team('admin'),
      handler: async (c) => {
        await svc.revokeInvitation(teamPrincipalOf(c), uuidParam(c, 'invitationId'));
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/invitations/accept',
      auth: USER,
      handler: async (c) => {
        await svc.acceptInvitation(principalOf(c), parseBody(S.accept, c.body));
        return { is_success: true };
      },
    },
    {
      method: 'POST',
      path: '/teams/current/transfer',
      auth: team('owner'),
      handler: async (c) => {
        await svc.transfer(teamPrincipalOf(c), parseBody(S.transfer, c.body).new_owner_id.toLowerCase());
        return { is_success: true };
      },
    },
  ];
  return routes;
}
