-- register: rebuild the per-user limit register of a product on a shard
-- that lost it with its data (shard/register.go), once: a register that
-- exists is never overwritten.
-- KEYS[1] claims hash
-- ARGV[1] per-user limit, then pairs: user id, the space-separated ids of
-- the units that user holds (locked or sold) on any shard
-- Returns 1 when written, 0 when the register was there.
if redis.call('HEXISTS', KEYS[1], '#') == 1 then return 0 end
for i = 2, #ARGV - 1, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], '#', ARGV[1])
return 1
