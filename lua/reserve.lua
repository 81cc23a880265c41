-- reserve (purchase.lua): hold one unit for a buyer on this shard.
-- KEYS[1] stock hash  KEYS[2] holds hash  KEYS[3] buyers hash  KEYS[4] outbox stream
-- ARGV[1] reservation id  ARGV[2] user id  ARGV[3] now, unix ms
-- ARGV[4] this shard's index  ARGV[5] product id
-- ARGV[6] unix ms the sale window is checked at ('' or absent: now)
return reserve(KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
