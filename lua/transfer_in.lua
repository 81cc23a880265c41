-- transfer_in: add a transfer's units to this shard, once per transfer id.
-- KEYS[1] stock hash  KEYS[2] transfers hash of this shard
-- ARGV[1] transfer id  ARGV[2] units  ARGV[3] source shard
-- Returns 1 when added, 0 when this transfer was added before, -1 when the
-- product is not on this shard.
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HINCRBY', KEYS[1], 'salable', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'alloc', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], 'in ' .. ARGV[2] .. ' ' .. ARGV[3])
return 1
