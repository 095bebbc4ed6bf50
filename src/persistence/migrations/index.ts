import { Migration20261122000000_foundation } from './Migration20261122000000_foundation.js';

/**
 * Checked-in migrations in the order they apply. Never edit one that has landed; add a new one.
 * Names sort by their timestamp prefix.
 */
export const migrationsList = [
  { name: 'Migration20261122000000_foundation', class: Migration20261122000000_foundation },
];
