/**
 * Ports the use cases share, implemented by services behind them and passed in by the composition
 * root (src/node/app.ts). Ports that belong to one area are declared beside its use cases.
 */

/**
 * The outbound URL policy (src/events/outbound.ts OutboundGuard: https only, no private, loopback
 * or metadata address unless allowlisted): resolves to null when `url` may be called, or to the
 * reason it is refused (a message for the caller, e.g. "resolves to a blocked address").
 */
export interface OutboundUrlPolicy {
  refusal(url: string): Promise<string | null>;
}
