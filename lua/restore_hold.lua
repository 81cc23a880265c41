-- restore_hold: put back the hold of a live order on a shard that lost it
-- (it came back from an AOF without its last writes: shard/resync.go). Only
-- a missing hold is written, so a repeat changes nothing.
-- KEYS[1] stock hash  KEYS[2] holds hash
-- ARGV[1] reservation id  ARGV[2] user id  ARGV[3] unix ms of the hold
-- ARGV[4] 'S' for a paid order, 'L' for one awaiting payment
-- Returns 'ok' (restored), 'exists', 'unknown' (no product here) or
-- 'no_unit' (no salable unit left to hold: the shard's counters and the
-- orders disagree beyond what a lost second explains).
-- (A void marker, 'V g': shard/walk.go, is no hold and is overwritten.)
local h = redis.call('HGET', KEYS[2], ARGV[1])
if h and string.sub(h, 1, 2) ~= 'V ' then return 'exists' end
local salable = tonumber(redis.call('HGET', KEYS[1], 'salable'))
if not salable then return 'unknown' end
if salable <= 0 then return 'no_unit' end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
redis.call('HINCRBY', KEYS[1], 'salable', -1)
if ARGV[4] == 'S' then
  redis.call('HINCRBY', KEYS[1], 'sold', 1)
else
  redis.call('HINCRBY', KEYS[1], 'locked', 1)
end
return 'ok'
