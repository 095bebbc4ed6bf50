/**
 * What the drivers hand back for a column, and the narrowing of jsonb values. Each store declares
 * one row interface per query (its SELECT's or RETURNING's columns) in these terms and maps rows
 * through typed functions; no row is `any`.
 *
 * The two drivers differ: through DATABASE_URL (node-postgres under MikroORM, which keeps
 * timestamps unparsed) a timestamptz arrives as text and a bigint (count(*), bigserial) as text;
 * through embedded PGlite they arrive as a Date and a number. Inside json_agg / row_to_json both are
 * JSON (timestamps as text, bigints as numbers). jsonb arrives parsed and is typed `unknown` here:
 * the mapping functions narrow it.
 */

/** A timestamptz column: text (PostgreSQL driver, or inside JSON) or a Date (PGlite). */
export type PgTimestamp = Date | string;
/** A bigint column or count(*): text (PostgreSQL driver) or a number (PGlite, or inside JSON). */
export type PgBigint = string | number;

import { isRecord } from '../shared/is-record.js';

export { isRecord };

/** A jsonb object, or {} when the value is not one (null, an array, a scalar). */
export const jsonObject = (v: unknown): Record<string, unknown> => (isRecord(v) ? v : {});

/** A jsonb array's elements that pass guard ([] when the value is not an array). */
export const jsonArrayOf = <T>(v: unknown, guard: (x: unknown) => x is T): T[] => (Array.isArray(v) ? v.filter(guard) : []);

const isString = (x: unknown): x is string => typeof x === 'string';

/** A jsonb array of strings (labels, model names): its string elements. */
export const jsonStrings = (v: unknown): string[] => jsonArrayOf(v, isString);

