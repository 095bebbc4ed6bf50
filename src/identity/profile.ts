/** GET /users/me: the user, their teams, and the features and quotas of the server, the account and each team. */
import type { Config } from '../shared/config.js';
import { ROLE_RANK, type TeamRole } from './principal.js';
import type { TeamRow, UserRow } from './store.js';

export function profile(c: Config, user: UserRow, rows: Array<TeamRow & { member_role: TeamRole }>): Record<string, unknown> {
  const teams: Record<string, unknown> = {};
  for (const t of rows)
    teams[t.id] = {
      member_role: t.member_role,
      is_personal: t.is_personal,
      features: { mcp_server: c.GANTRY_MCP_ENABLED, notifications: true, manage_members: ROLE_RANK[t.member_role] >= ROLE_RANK.admin, transfer_ownership: t.member_role === 'owner' },
      quotas: { max_agents: c.quotas.maxAgents, max_concurrent_tasks: c.quotas.maxConcurrentTasks },
    };
  return {
    id: user.id,
    first_name: user.first_name,
    last_name: user.last_name,
    display_name: user.display_name,
    email_address: user.email_address,
    team_list: rows.map((t) => ({ id: t.id, display_name: t.display_name })),
    feature_flags: {
      global: {
        features: {
          registration: c.GANTRY_REGISTRATION_ENABLED,
          oauth: c.oauthProviders.length > 0,
          email: Boolean(c.SMTP_URL),
          oidc_provider: false,
          mcp_server: c.GANTRY_MCP_ENABLED,
          auto_team: c.GANTRY_AUTO_TEAM,
          notifications: true,
        },
        quotas: { max_users: c.quotas.maxUsers, max_teams: c.quotas.maxTeams, max_agents: c.quotas.maxAgents, max_concurrent_tasks: c.quotas.maxConcurrentTasks },
      },
      account: {
        features: { manual_team_creation: c.GANTRY_MANUAL_TEAM_CREATION, team_invitation_accept: true },
        quotas: { max_owned_teams: c.quotas.maxOwnedTeams },
      },
      teams,
    },
  };
}
