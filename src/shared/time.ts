/** An instant as ISO 8601 (UTC), or null: a Date, a driver's timestamp text or epoch milliseconds. */
export const iso = (v: Date | string | number | null | undefined): string | null => (v === null || v === undefined ? null : new Date(v).toISOString());
