-- reserve: hold one unit for a buyer, atomically with its outbox entry.
-- KEYS[1] stock hash  KEYS[2] holds hash  KEYS[3] buyers hash  KEYS[4] outbox stream
-- ARGV[1] reservation id  ARGV[2] user id  ARGV[3] now, unix ms
-- ARGV[4] this shard's index  ARGV[5] product id
-- Returns 'ok', 'duplicate' (this reservation id is already held here),
-- 'unknown' (no such product on this shard), 'not_started', 'ended',
-- 'sold_out' or 'limit' (the user already holds the limit on this shard).
local s = redis.call('HMGET', KEYS[1], 'salable', 'limit', 'starts', 'ends')
if not s[1] then return 'unknown' end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 'duplicate' end
local now = tonumber(ARGV[3])
local starts, ends = tonumber(s[3]) or 0, tonumber(s[4]) or 0
if starts > 0 and now < starts then return 'not_started' end
if ends > 0 and now >= ends then return 'ended' end
if (tonumber(s[1]) or 0) <= 0 then return 'sold_out' end
if (tonumber(redis.call('HGET', KEYS[3], ARGV[2])) or 0) >= (tonumber(s[2]) or 1) then
  return 'limit'
end
redis.call('HINCRBY', KEYS[1], 'salable', -1)
redis.call('HINCRBY', KEYS[1], 'locked', 1)
redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
redis.call('HSET', KEYS[2], ARGV[1], 'L ' .. ARGV[2] .. ' ' .. ARGV[3])
redis.call('XADD', KEYS[4], '*', 'res', ARGV[1], 'user', ARGV[2],
  'product', ARGV[5], 'shard', ARGV[4], 'at', ARGV[3])
return 'ok'
