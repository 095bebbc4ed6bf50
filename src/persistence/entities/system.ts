import { defineEntity, p } from '@mikro-orm/core';

/** Key/value facts about this installation (installation_id, signing secrets generated at first boot). */
export const SystemMeta = defineEntity({
  name: 'SystemMeta',
  tableName: 'system_meta',
  properties: {
    key: p.string().primary(),
    value: p.text(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
