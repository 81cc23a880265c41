-- purchase: a batch of purchase steps for one product on this shard, run as
-- one script execution (the protocol and why the per-user limit holds are in
-- shard/purchase.go). Concurrent purchases bound for one shard share it: the
-- stock hash is read once and written once per batch, whatever its size.
-- KEYS[1] stock hash  KEYS[2] claims hash (the per-user limit register of
--   the buyers whose home this shard is)  KEYS[3] holds hash  KEYS[4] outbox
-- ARGV[1] (unused: the shard's own clock, TIME, is the sale's one clock)
-- ARGV[2] this shard's index  ARGV[3] product id
-- (the outbox entry is res, user, at: the stream names the product and the
-- shard)
-- then four values per step: op, user id, reservation id, the unix ms the
-- sale window is checked at ('' = now: a spooled purchase keeps the time it
-- arrived). op is
--   P  claim, then reserve here: the buyer's home, where a purchase starts
--   C  claim only (a purchase that reserves elsewhere first)
--   R  reserve only: the claim is held at the buyer's home
--   U  give the claim back: its attempt got no unit
--   K  claim again for a reservation made already (its hold put back after
--      the shard's crash took it with the claim): C without the window,
--      which may have ended since
--   Q  resolve: a P or R step of this reservation id went unanswered (a
--      deadline, a broken connection), so it may have run, or may still
--      run. If the id holds a unit here, 'held'. Otherwise fence it: the
--      hold field becomes the void marker 'V g' (g one more than before),
--      which every P or R step of the id sent before it finds and leaves
--      alone, so that step can never take a unit; 'void g' is returned.
-- P and R may carry the void generation they were sent for, as 'P:g' or
-- 'R:g': such a step takes a unit only over the marker 'V g'.
-- Returns one status per step:
--   ok           reserved (P, R); claim recorded (C); given back (U)
--   dup          this reservation id is held here already (P, R; a replay)
--   void         the id is fenced here under another generation (P, R:
--                nothing written; resolve again to learn the generation)
--   held, void g  (Q) see above
--   empty        no salable unit here (P: the claim is held; R)
--   limit        the buyer's claims fill the limit (P, C; nothing written)
--   not_started, ended   outside the window (nothing written)
--   unknown      the product is not here (for P and C: the register is
--                missing, so the limit cannot be vouched for)
local stock, claims, holds, outbox = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- The sale window is judged, and holds are stamped, by the shard's clock:
-- one clock for every coordinator, whatever their own clocks say.
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local shard, product = ARGV[2], ARGV[3]
local s = redis.call('HMGET', stock, 'salable', 'locked', 'limit', 'starts', 'ends')
local salable, locked = tonumber(s[1]), tonumber(s[2])
local limit = tonumber(s[3])
local here = salable ~= nil
if not here then
  -- A register rebuilt after the shard lost its data (shard/register.go)
  -- keeps the limit beside the claims; this shard has no stock then.
  limit = tonumber(redis.call('HGET', claims, '#'))
  salable, locked = 0, 0
end
local starts, ends = tonumber(s[4]) or 0, tonumber(s[5]) or 0
local moved = 0

local function window(asof)
  local t = tonumber(asof) or tonumber(now)
  if starts > 0 and t < starts then return 'not_started' end
  if ends > 0 and t >= ends then return 'ended' end
  return nil
end

-- claim counts the attempt against the buyer's limit; ok when recorded
-- (or recorded before: a replay of the same attempt).
local function claim(user, id)
  if not limit then return 'unknown' end
  local cur = redis.call('HGET', claims, user)
  if not cur then
    redis.call('HSET', claims, user, id)
    return 'ok'
  end
  local n = 0
  for x in string.gmatch(cur, '%S+') do
    if x == id then return 'ok' end
    n = n + 1
  end
  if n >= limit then return 'limit' end
  redis.call('HSET', claims, user, cur .. ' ' .. id)
  return 'ok'
end

local function unclaim(user, id)
  local cur = redis.call('HGET', claims, user)
  if not cur then return 'ok' end
  local keep = {}
  for x in string.gmatch(cur, '%S+') do
    if x ~= id then keep[#keep + 1] = x end
  end
  if #keep == 0 then
    redis.call('HDEL', claims, user)
  else
    redis.call('HSET', claims, user, table.concat(keep, ' '))
  end
  return 'ok'
end

-- take holds one unit for the buyer, with its outbox entry.
local function take(user, id)
  if salable <= 0 then return 'empty' end
  salable, locked, moved = salable - 1, locked + 1, moved + 1
  redis.call('HSET', holds, id, 'L ' .. user .. ' ' .. now)
  redis.call('XADD', outbox, '*', 'res', id, 'user', user, 'at', now)
  return 'ok'
end

-- resolve: see Q above.
local function resolve(user, id)
  local h = redis.call('HGET', holds, id)
  local g = 1
  if h then
    if string.sub(h, 1, 2) ~= 'V ' then return 'held' end
    g = tonumber(string.sub(h, 3)) + 1
  end
  redis.call('HSET', holds, id, 'V ' .. g)
  return 'void ' .. g
end

local function step(op, user, id, asof)
  if op == 'U' then return unclaim(user, id) end
  if op == 'K' then return claim(user, id) end
  if op == 'Q' then return resolve(user, id) end
  local gen = nil
  if #op > 1 then
    gen = 'V ' .. string.sub(op, 3)
    op = string.sub(op, 1, 1)
  end
  local w = window(asof)
  if w then return w end
  if op == 'C' then return claim(user, id) end
  local h = redis.call('HGET', holds, id)
  if h then
    if string.sub(h, 1, 2) ~= 'V ' then return 'dup' end
    if h ~= gen then return 'void' end
  end
  if op == 'R' then
    if not here then return 'unknown' end
    return take(user, id)
  end
  local c = claim(user, id)
  if c ~= 'ok' then return c end
  return take(user, id)
end

local out = {}
for i = 4, #ARGV, 4 do
  out[#out + 1] = step(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
end
if moved > 0 then
  redis.call('HSET', stock, 'salable', salable, 'locked', locked)
end
return out
