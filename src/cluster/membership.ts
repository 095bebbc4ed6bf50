// TEMPORARY placeholder: the membership helper's implementation replaces this file at merge.
import type { Logger } from '../shared/logger.js';
import type { MembershipPort } from './ports.js';
import type { RedisConnection } from './redis.js';

export function createMembership(_conn: RedisConnection, _o: { leaseMs: number; logger: Logger }): MembershipPort {
  throw new Error('membership not merged yet');
}
