/**
 * The shared counters of cluster-wide counts (WindowCounts in src/shared/window-counts.ts, behind
 * the request rate limits and the failed-credential limiter): one Redis key per (limit key,
 * 10-second slot), expiring after the window. One script per sync adds this
 * node's requests to the current slot of every key it has seen and returns each key's count over the
 * last six slots (the last minute), with the Redis server's clock, so nodes agree on the slots.
 */
import type { RedisConnection } from './redis.js';

// KEYS: none (built from the prefix). ARGV[1] prefix, then pairs (key, delta)
const SYNC = `local t = redis.call('TIME')
local slot = math.floor(tonumber(t[1]) / 10)
local out = {}
for i = 2, #ARGV, 2 do
  local base = ARGV[1] .. ARGV[i] .. ':'
  local d = tonumber(ARGV[i + 1])
  if d > 0 then
    redis.call('INCRBY', base .. slot, d)
    redis.call('EXPIRE', base .. slot, 70)
  end
  local n = 0
  for s = slot - 5, slot do n = n + tonumber(redis.call('GET', base .. s) or '0') end
  out[#out + 1] = n
end
return out`;

export class RedisWindowCounter {
  private readonly prefix: string;
  constructor(private readonly conn: RedisConnection) {
    this.prefix = `${conn.prefix}rl:`;
  }

  async sync(deltas: ReadonlyMap<string, number>): Promise<Map<string, number>> {
    const keys = [...deltas.keys()];
    if (keys.length === 0) return new Map();
    const args = [this.prefix];
    for (const k of keys) args.push(k, String(deltas.get(k) ?? 0));
    const counts = (await this.conn.client.eval(SYNC, { keys: [], arguments: args })) as number[];
    return new Map(keys.map((k, i) => [k, Number(counts[i] ?? 0)]));
  }
}
