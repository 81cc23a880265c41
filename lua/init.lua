-- init: allocate a product's units on this shard, once.
-- KEYS[1] stock hash of the product on this shard
-- KEYS[2] claims hash (the per-user limit register; it keeps the limit too,
--         so it outlives a lost allocation: shard/register.go)
-- ARGV[1] alloc (units this shard may sell)   ARGV[2] per-user limit
-- ARGV[3] window start, unix ms (0 = none)     ARGV[4] window end, unix ms (0 = none)
-- ARGV[5] definition (canonical JSON of the whole product)
-- ARGV[6] epoch (random marker of this initialisation)
-- ARGV[7] '1' when this shard is known to have been initialised before
-- Returns 'created', 'exists' (same definition: nothing changed), 'conflict',
-- or 'lost' (it was initialised before and its data is gone: nothing is
-- written, because a new allocation would sell its units a second time).
local def = redis.call('HGET', KEYS[1], 'def')
if def then
  if def == ARGV[5] then return 'exists' end
  return 'conflict'
end
if ARGV[7] == '1' then return 'lost' end
redis.call('HSET', KEYS[1],
  'alloc', ARGV[1], 'salable', ARGV[1], 'locked', 0, 'sold', 0,
  'limit', ARGV[2], 'starts', ARGV[3], 'ends', ARGV[4],
  'def', ARGV[5], 'epoch', ARGV[6])
redis.call('HSET', KEYS[2], '#', ARGV[2])
return 'created'
