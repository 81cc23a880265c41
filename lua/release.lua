#!lua flags=allow-oom
-- (allow-oom: a shard at maxmemory, which refuses new holds, still lets
-- settlements through: they free units, and must not wait for memory.)
-- release: an unpaid hold moves locked -> salable (pay failed, cancelled,
-- timed out, failed fast). Only a locked hold moves, so a repeated or late
-- release changes nothing.
-- KEYS[1] stock hash  KEYS[2] holds hash
-- ARGV[1] reservation id
-- Returns 'ok', 'already' (released before), 'sold' (paid: a sold unit is
-- never released) or 'unknown'.
local h = redis.call('HGET', KEYS[2], ARGV[1])
-- A void marker ('V g': shard/walk.go) is no hold.
if not h or string.sub(h, 1, 2) == 'V ' then return 'unknown' end
local state, user, rest = string.match(h, '^(%a) (%S+) (.*)$')
if state == 'R' then return 'already' end
if state == 'S' then return 'sold' end
redis.call('HSET', KEYS[2], ARGV[1], 'R ' .. user .. ' ' .. rest)
redis.call('HINCRBY', KEYS[1], 'locked', -1)
redis.call('HINCRBY', KEYS[1], 'salable', 1)
return 'ok'
