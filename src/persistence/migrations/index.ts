import { Migration20261122000000_foundation } from './Migration20261122000000_foundation.js';
import { Migration20261122000100_identity } from './Migration20261122000100_identity.js';
import { Migration20261122000200_workflows_tasks } from './Migration20261122000200_workflows_tasks.js';
import { Migration20261122000400_events } from './Migration20261122000400_events.js';
import { Migration20261122000500_files } from './Migration20261122000500_files.js';
import { Migration20261124000000_task_not_before } from './Migration20261124000000_task_not_before.js';
import { Migration20261124000100_idempotency } from './Migration20261124000100_idempotency.js';
import { Migration20261124000500_cluster_members } from './Migration20261124000500_cluster_members.js';
import { Migration20261124000600_signing_keys } from './Migration20261124000600_signing_keys.js';
import { Migration20261124000700_containers } from './Migration20261124000700_containers.js';
import { Migration20261124000800_vault } from './Migration20261124000800_vault.js';
import { Migration20261125000100_cloud_providers } from './Migration20261125000100_cloud_providers.js';
import { Migration20261125000200_audit_sso } from './Migration20261125000200_audit_sso.js';
import { Migration20261125000300_task_trace } from './Migration20261125000300_task_trace.js';
import { Migration20261126000100_cloud_partner_nodes } from './Migration20261126000100_cloud_partner_nodes.js';
import { Migration20261126000200_task_checkpoint } from './Migration20261126000200_task_checkpoint.js';
import { Migration20261126002800_webhook_dropped } from './Migration20261126002800_webhook_dropped.js';
import { Migration20261126100000_scheduling } from './Migration20261126100000_scheduling.js';
import { Migration20261126100100_usage } from './Migration20261126100100_usage.js';
import { Migration20261126100200_session_affinity } from './Migration20261126100200_session_affinity.js';
import { Migration20261126100300_pairing_mint_agent } from './Migration20261126100300_pairing_mint_agent.js';
import { Migration20261126100400_autoscaling } from './Migration20261126100400_autoscaling.js';
import { Migration20261126100600_rollout_revision } from './Migration20261126100600_rollout_revision.js';
import { Migration20261126100500_agent_node_classes } from './Migration20261126100500_agent_node_classes.js';

/**
 * Checked-in migrations in the order they apply. Never edit one that has landed; add a new one.
 * Names sort by their timestamp prefix.
 */
export const migrationsList = [
  { name: 'Migration20261122000000_foundation', class: Migration20261122000000_foundation },
  { name: 'Migration20261122000100_identity', class: Migration20261122000100_identity },
  { name: 'Migration20261122000200_workflows_tasks', class: Migration20261122000200_workflows_tasks },
  { name: 'Migration20261122000400_events', class: Migration20261122000400_events },
  { name: 'Migration20261122000500_files', class: Migration20261122000500_files },
  { name: 'Migration20261124000000_task_not_before', class: Migration20261124000000_task_not_before },
  { name: 'Migration20261124000100_idempotency', class: Migration20261124000100_idempotency },
  { name: 'Migration20261124000500_cluster_members', class: Migration20261124000500_cluster_members },
  { name: 'Migration20261124000600_signing_keys', class: Migration20261124000600_signing_keys },
  { name: 'Migration20261124000700_containers', class: Migration20261124000700_containers },
  { name: 'Migration20261124000800_vault', class: Migration20261124000800_vault },
  { name: 'Migration20261125000100_cloud_providers', class: Migration20261125000100_cloud_providers },
  { name: 'Migration20261125000200_audit_sso', class: Migration20261125000200_audit_sso },
  { name: 'Migration20261125000300_task_trace', class: Migration20261125000300_task_trace },
  { name: 'Migration20261126000100_cloud_partner_nodes', class: Migration20261126000100_cloud_partner_nodes },
  { name: 'Migration20261126000200_task_checkpoint', class: Migration20261126000200_task_checkpoint },
  { name: 'Migration20261126002800_webhook_dropped', class: Migration20261126002800_webhook_dropped },
  { name: 'Migration20261126100000_scheduling', class: Migration20261126100000_scheduling },
  { name: 'Migration20261126100100_usage', class: Migration20261126100100_usage },
  { name: 'Migration20261126100200_session_affinity', class: Migration20261126100200_session_affinity },
  { name: 'Migration20261126100300_pairing_mint_agent', class: Migration20261126100300_pairing_mint_agent },
  { name: 'Migration20261126100400_autoscaling', class: Migration20261126100400_autoscaling },
  { name: 'Migration20261126100500_agent_node_classes', class: Migration20261126100500_agent_node_classes },
  { name: 'Migration20261126100600_rollout_revision', class: Migration20261126100600_rollout_revision },
];
