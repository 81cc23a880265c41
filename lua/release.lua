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
if not h or string.sub(h, 1, 2) == 'V ' then
  -- No hold: the shard lost it (it came back from an AOF cut back past the
  -- reservation) or never took it. Its order is final all the same, so the
  -- id must never take a unit here later: a purchase of it still in doubt
  -- (a spooled one resolved after the crash, a reserve step on its way)
  -- would find nothing, take a unit, and leave it locked for an order that
  -- nothing will settle again. The id is marked released ('R -': no buyer
  -- recorded), which every later step of it finds as a hold ('dup',
  -- 'held') and takes nothing. Not on a shard without the product.
  if redis.call('EXISTS', KEYS[1]) == 1 then
    local t = redis.call('TIME')
    redis.call('HSET', KEYS[2], ARGV[1], 'R - ' .. string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
  end
  return 'unknown'
end
local state, user, rest = string.match(h, '^(%a) (%S+) (.*)$')
if state == 'R' then return 'already' end
if state == 'S' then return 'sold' end
redis.call('HSET', KEYS[2], ARGV[1], 'R ' .. user .. ' ' .. rest)
redis.call('HINCRBY', KEYS[1], 'locked', -1)
redis.call('HINCRBY', KEYS[1], 'salable', 1)
return 'ok'
