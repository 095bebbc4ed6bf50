import { z } from 'zod';
import type { RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import { parsePage } from '../../shared/pagination.js';
import type { TeamUseCases } from '../../app/identity.js';
import { auditOf, parseBody, principalOf, teamPrincipalOf, uuidParam } from '../params.js';
import * as D from '../openapi/schemas.js';

const S = {
  team: z.strictObject({ display_name: z.string().trim().min(1).max(255) }),
  role: z.strictObject({ member_role: z.enum(['admin', 'member'], { error: 'must be admin or member (ownership changes through /teams/current/transfer)' }) }),
  invite: z.strictObject({ email_address: z.email().max(254), member_role: z.enum(['admin', 'member']).default('member') }),
  accept: z.strictObject({ invitation_token: z.string().min(1).max(512) }),
  transfer: z.strictObject({ new_owner_id: z.uuid() }),
};

const USER: RouteAuth = { kinds: ['user', 'device'] };
const team = (role: 'member' | 'admin' | 'owner'): RouteAuth => ({ kinds: ['user', 'device'], team: true, ...(role === 'member' ? {} : { role }) });

/** Teams, members, invitations and ownership transfer. Roles: owner > admin > member. The use cases are src/app/identity.ts. */
export function teamRoutes(svc: TeamUseCases): RouteDef[] {
  const routes: RouteDef[] = [
    { method: 'POST', path: '/teams', auth: USER, doc: { summary: 'Create a team', tags: ['teams'], body: S.team, responses: { 200: D.IdResult } }, handler: async (c) => svc.createTeam(principalOf(c), parseBody(S.team, c.body), auditOf(c, 'team.create', 'team')) },
    { method: 'GET', path: '/teams', auth: USER, doc: { summary: 'List the caller\'s teams', tags: ['teams'], paged: true, responses: { 200: D.pageOf('team_list', D.Team) } }, handler: async (c) => svc.listTeams(principalOf(c), parsePage(c.query)) },
    { method: 'GET', path: '/teams/current', auth: team('member'), doc: { summary: 'The current team', tags: ['teams'], responses: { 200: D.Team } }, handler: async (c) => svc.currentTeam(teamPrincipalOf(c)) },
    { method: 'PUT', path: '/teams/current', auth: team('admin'), doc: { summary: 'Rename the current team', tags: ['teams'], body: S.team, responses: { 200: D.IdResult } }, handler: async (c) => svc.renameTeam(teamPrincipalOf(c), parseBody(S.team, c.body), (action) => auditOf(c, action, 'team', teamPrincipalOf(c).teamId)) },
    {
      method: 'DELETE',
      path: '/teams/current',
      doc: { summary: 'Delete the current team (owner)', tags: ['teams'], responses: { 200: D.Success }, errors: [409] },
      auth: team('owner'),
      handler: async (c) => svc.deleteTeam(teamPrincipalOf(c), (action) => auditOf(c, action, 'team', teamPrincipalOf(c).teamId)),
    },
    { method: 'GET', path: '/teams/current/members', auth: team('member'), doc: { summary: 'List members', tags: ['teams'], paged: true, responses: { 200: D.pageOf('member_list', D.Member) } }, handler: async (c) => svc.members(teamPrincipalOf(c), parsePage(c.query)) },
    {
      method: 'PUT',
      path: '/teams/current/members/{userId}',
      doc: { summary: 'Change a member\'s role (answers the member\'s user id)', tags: ['teams'], body: S.role, responses: { 200: D.IdResult }, errors: [409] },
      auth: team('admin'),
      handler: async (c) => {
        const userId = uuidParam(c, 'userId');
        const role = parseBody(S.role, c.body).member_role;
        return svc.setMemberRole(teamPrincipalOf(c), userId, role, auditOf(c, 'member.role_change', 'member', userId, { member_role: role }));
      },
    },
    {
      method: 'DELETE',
      path: '/teams/current/members/{userId}',
      doc: { summary: 'Remove a member (or leave)', tags: ['teams'], responses: { 200: D.Success }, errors: [409] },
      auth: team('member'),
      handler: async (c) => {
        const userId = uuidParam(c, 'userId');
        return svc.removeMember(teamPrincipalOf(c), userId, (action) => auditOf(c, action, 'member', userId));
      },
    },
    { method: 'POST', path: '/teams/current/invitations', auth: team('admin'), doc: { summary: 'Invite by email', tags: ['teams'], body: S.invite, responses: { 200: D.IdResult }, errors: [409] }, handler: async (c) => svc.invite(teamPrincipalOf(c), parseBody(S.invite, c.body), auditOf(c, 'invitation.create', 'invitation')) },
    { method: 'GET', path: '/teams/current/invitations', auth: team('admin'), doc: { summary: 'List pending invitations', tags: ['teams'], paged: true, responses: { 200: D.pageOf('invitation_list', D.Invitation) } }, handler: async (c) => svc.invitations(teamPrincipalOf(c), parsePage(c.query)) },
    {
      method: 'DELETE',
      path: '/teams/current/invitations/{invitationId}',
      doc: { summary: 'Revoke an invitation', tags: ['teams'], responses: { 200: D.Success } },
      auth: team('admin'),
      handler: async (c) => {
        const id = uuidParam(c, 'invitationId');
        return svc.revokeInvitation(teamPrincipalOf(c), id, auditOf(c, 'invitation.revoke', 'invitation', id));
      },
    },
    {
      method: 'POST',
      path: '/invitations/accept',
      doc: { summary: 'Accept an invitation', tags: ['teams'], body: S.accept, responses: { 200: D.Success }, errors: [409, 410] },
      auth: USER,
      handler: async (c) => svc.acceptInvitation(principalOf(c), parseBody(S.accept, c.body), auditOf(c, 'invitation.accept', 'invitation')),
    },
    {
      method: 'POST',
      path: '/teams/current/transfer',
      doc: { summary: 'Transfer ownership to an existing member (owner)', tags: ['teams'], body: S.transfer, responses: { 200: D.Success }, errors: [409] },
      auth: team('owner'),
      handler: async (c) => svc.transfer(teamPrincipalOf(c), parseBody(S.transfer, c.body).new_owner_id, (to) => auditOf(c, 'team.transfer', 'team', teamPrincipalOf(c).teamId, { new_owner_id: to })),
    },
  ];
  return routes;
}
