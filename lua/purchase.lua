-- The two steps of a purchase, as functions. lua.go prepends this file to
-- claim.lua, reserve.lua and claim_reserve.lua, so each script Redis runs is
-- one self-contained chunk.

-- claim: count one purchase attempt against the buyer's per-user limit in
-- this claim register (see shard/claim.go for the protocol).
-- stock, claims: the product's stock hash (for the limit) and claims hash
-- user, id: the buyer and the claim id (the reservation id)
-- known, from: known[from..] are claim ids the buyer's other register
--   holds; they are merged in, so the two registers converge whenever both
--   answer.
-- Returns the status — 'ok' (the claim is recorded, or was already),
-- 'limit' (the buyer's claims already fill the limit; the claim is not
-- recorded) or 'unknown' (no such product here) — and the ids the register
-- holds for the buyer after the call.
local function claim(stock, claims, user, id, known, from)
  local limit = tonumber(redis.call('HGET', stock, 'limit'))
  if not limit then return 'unknown', {} end
  local ids, seen = {}, {}
  local function add(x)
    if x ~= '' and not seen[x] then seen[x] = true; ids[#ids + 1] = x end
  end
  local cur = redis.call('HGET', claims, user)
  if cur then for x in string.gmatch(cur, '%S+') do add(x) end end
  local mine = seen[id]
  -- The other register passes this claim along when it granted it; it
  -- counts here only if this register grants it too.
  for i = from, #known do if known[i] ~= id then add(known[i]) end end
  local status = 'ok'
  if not mine then
    if #ids >= limit then status = 'limit' else add(id) end
  end
  if #ids > 0 then redis.call('HSET', claims, user, table.concat(ids, ' ')) end
  return status, ids
end

-- reserve: hold one unit for a buyer, atomically with its outbox entry.
-- k: {stock hash, holds hash, buyers hash, outbox stream}
-- id: reservation id  user: user id  now: unix ms  shard: this shard's
-- index  product: product id  asof: unix ms the sale window is checked at
-- (the purchase's arrival; a spooled purchase keeps the time it arrived;
-- '' means now)
-- Returns 'ok', 'duplicate' (this reservation id is already held here),
-- 'unknown' (no such product on this shard), 'not_started', 'ended',
-- 'sold_out' or 'limit' (the user already holds the limit on this shard).
local function reserve(k, id, user, now, shard, product, asof)
  local s = redis.call('HMGET', k[1], 'salable', 'limit', 'starts', 'ends')
  if not s[1] then return 'unknown' end
  if redis.call('HEXISTS', k[2], id) == 1 then return 'duplicate' end
  local t = tonumber(asof) or tonumber(now)
  local starts, ends = tonumber(s[3]) or 0, tonumber(s[4]) or 0
  if starts > 0 and t < starts then return 'not_started' end
  if ends > 0 and t >= ends then return 'ended' end
  if (tonumber(s[1]) or 0) <= 0 then return 'sold_out' end
  if (tonumber(redis.call('HGET', k[3], user)) or 0) >= (tonumber(s[2]) or 1) then
    return 'limit'
  end
  redis.call('HINCRBY', k[1], 'salable', -1)
  redis.call('HINCRBY', k[1], 'locked', 1)
  redis.call('HINCRBY', k[3], user, 1)
  redis.call('HSET', k[2], id, 'L ' .. user .. ' ' .. now)
  redis.call('XADD', k[4], '*', 'res', id, 'user', user,
    'product', product, 'shard', shard, 'at', now)
  return 'ok'
end
