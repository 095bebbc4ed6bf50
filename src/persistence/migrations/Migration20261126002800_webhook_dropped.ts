import { Migration } from '@mikro-orm/migrations';

/**
 * Webhook deliveries gain the `dropped` status: a pending or retrying delivery of a webhook that
 * was disabled is never sent ("while disabled, deliveries are dropped, not queued"); the delivery
 * log records it as dropped. Expand-only: the check accepts one more value; a node of the previous
 * version never writes it and does not claim dropped rows (it claims only pending/delivering).
 */
export class Migration20261126002800_webhook_dropped extends Migration {
  override up(): void {
    this.addSql('alter table webhook_deliveries drop constraint if exists webhook_deliveries_delivery_status_check;');
    this.addSql(`alter table webhook_deliveries add constraint webhook_deliveries_delivery_status_check check (delivery_status in ('pending', 'delivering', 'succeeded', 'failed', 'dropped'));`);
  }

  override down(): void {
    this.addSql(`update webhook_deliveries set delivery_status = 'failed' where delivery_status = 'dropped';`);
    this.addSql('alter table webhook_deliveries drop constraint if exists webhook_deliveries_delivery_status_check;');
    this.addSql(`alter table webhook_deliveries add constraint webhook_deliveries_delivery_status_check check (delivery_status in ('pending', 'delivering', 'succeeded', 'failed'));`);
  }
}
