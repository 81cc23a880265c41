-- window: move a product's sale window on this shard (an operator's PATCH).
-- KEYS[1] stock hash
-- ARGV[1] window start, unix ms (0 = none)   ARGV[2] window end, unix ms (0 = none)
-- Returns 1, or 0 when the product is not on this shard (nothing is written:
-- a stock hash without its definition would look like a lost shard).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'starts', ARGV[1], 'ends', ARGV[2])
return 1
