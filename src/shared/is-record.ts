/** A plain JSON object (not null, not an array): the narrowing of parsed JSON every boundary uses. */
export const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
