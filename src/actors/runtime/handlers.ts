/**
 * Exhaustive handler maps: one handler per message type of a protocol, each receiving exactly its
 * own message. A map missing a type (or handling one that does not exist) does not compile, which
 * replaces the switch-in-receive whose missing case went unnoticed.
 */

/** `{[T in M['type']]: handler of the message of type T}` with extra arguments A and result R. */
export type Handlers<M extends { type: string }, A extends unknown[], R> = {
  [T in M['type']]: (m: Extract<M, { type: T }>, ...args: A) => R;
};

/** Calls the handler of m's type. */
export function dispatchTo<M extends { type: string }, A extends unknown[], R>(handlers: Handlers<M, A, R>, m: M, ...args: A): R {
  const h = handlers[m.type as M['type']] as (m: M, ...args: A) => R;
  return h(m, ...args);
}
