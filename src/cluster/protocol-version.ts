/**
 * The node-to-node protocol version (remoting Hello and every envelope; docs/architecture.md
 * "Rolling upgrades"). Raise PROTOCOL_VERSION when a release adds remoting messages or fields;
 * raise MIN_PEER_PROTOCOL only when a release can no longer serve an older peer (a removed message,
 * a changed meaning), which makes rolling from a release older than that impossible: the notes of
 * such a release say so.
 *
 *  1: the first release (no protocol_version on the wire).
 *  2: Hello and Envelope carry protocol_version; the receiving node answers the Hello.
 */
export const PROTOCOL_VERSION = 2;
export const MIN_PEER_PROTOCOL = 1;

/** The version a peer speaks: an absent field (0) is protocol 1. */
export const peerProtocol = (wire: number | undefined): number => (wire && wire > 0 ? wire : 1);
