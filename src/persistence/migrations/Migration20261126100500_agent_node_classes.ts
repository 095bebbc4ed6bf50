import { Migration } from '@mikro-orm/migrations';

/**
 * Agents report the node class_types their ComfyUI lists (Hello/Inventory node_classes): a workflow
 * pushed with a class_type no agent of the team lists gets a warning. Expand-only: a node of the
 * previous version never writes the column, its default is an empty list (= not reported).
 */
export class Migration20261126100500_agent_node_classes extends Migration {
  override up(): void {
    this.addSql("alter table agents add column if not exists node_classes jsonb not null default '[]'::jsonb;");
  }

  override down(): void {
    this.addSql('alter table agents drop column if exists node_classes;');
  }
}
