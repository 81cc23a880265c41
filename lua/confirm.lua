#!lua flags=allow-oom
-- (allow-oom: a shard at maxmemory, which refuses new holds, still lets
-- settlements through: they free units, and must not wait for memory.)
-- confirm: a paid hold moves locked -> sold. Only a locked hold moves, so a
-- repeated or late confirm changes nothing.
-- KEYS[1] stock hash  KEYS[2] holds hash
-- ARGV[1] reservation id
-- Returns 'ok', 'already' (sold before), 'released' (released before: the
-- unit went back on sale and cannot be sold to this hold) or 'unknown'.
local h = redis.call('HGET', KEYS[2], ARGV[1])
-- A void marker ('V g': shard/walk.go) is no hold.
if not h or string.sub(h, 1, 2) == 'V ' then return 'unknown' end
local state, rest = string.match(h, '^(%a) (.*)$')
if state == 'S' then return 'already' end
if state == 'R' then return 'released' end
redis.call('HSET', KEYS[2], ARGV[1], 'S ' .. rest)
redis.call('HINCRBY', KEYS[1], 'locked', -1)
redis.call('HINCRBY', KEYS[1], 'sold', 1)
return 'ok'
