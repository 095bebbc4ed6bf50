import { Migration } from '@mikro-orm/migrations';

/**
 * Comfy Cloud correctness (issue 25):
 *
 * - cloud_providers.partner_nodes_on_agents: the team lets its Comfy Cloud key reach its own agents
 *   (in the Assign message) so partner (API) nodes of local runs can bill to it
 *   (`extra_data.api_key_comfy_org`). Off by default.
 * - cloud_jobs.accepted: the row is now written BEFORE the submission with the prompt_id we chose
 *   (false until the provider answered it), so a retry after a timeout or a 5xx looks that id up at
 *   the provider instead of creating a second job. Existing rows were written after acceptance.
 */
export class Migration20261126000100_cloud_partner_nodes extends Migration {
  override up(): void {
    this.addSql('alter table cloud_providers add column partner_nodes_on_agents boolean not null default false;');
    this.addSql('alter table cloud_jobs add column accepted boolean not null default true;');
  }

  override down(): void {
    this.addSql('alter table cloud_jobs drop column if exists accepted;');
    this.addSql('alter table cloud_providers drop column if exists partner_nodes_on_agents;');
  }
}
