-- window: move a product's sale window on this shard (an operator's PATCH,
-- a resync, or a purchase that found this shard's copy behind the catalog).
-- KEYS[1] stock hash
-- ARGV[1] window start, unix ms (0 = none)   ARGV[2] window end, unix ms (0 = none)
-- ARGV[3] the window's version: the catalog's controls version it was read
--         at. Copies are written by several coordinators that read the
--         catalog at different times, so an older version than the shard's
--         ('wver') is not written: the newest window read anywhere wins,
--         whatever order the writes arrive in.
-- Returns 0 when the product is not on this shard (nothing is written: a
-- stock hash without its definition would look like a lost shard), 1 when
-- the window changed, 2 when it did not (the same window, or a newer one
-- kept).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local w = redis.call('HMGET', KEYS[1], 'starts', 'ends', 'wver')
local v = tonumber(ARGV[3])
if v < (tonumber(w[3]) or 0) then return 2 end
redis.call('HSET', KEYS[1], 'wver', ARGV[3])
if w[1] == ARGV[1] and w[2] == ARGV[2] then return 2 end
redis.call('HSET', KEYS[1], 'starts', ARGV[1], 'ends', ARGV[2])
return 1
