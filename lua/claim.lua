-- claim: count one purchase attempt against the buyer's per-user limit in
-- this claim register (see shard/claim.go for the protocol).
-- KEYS[1] stock hash (for the limit)  KEYS[2] claims hash
-- ARGV[1] user id  ARGV[2] claim id (the reservation id)
-- ARGV[3..] claim ids the buyer's other register holds; they are merged in,
--           so the two registers converge whenever both answer.
-- Returns {status, id...}: status 'ok' (the claim is recorded, or was
-- already), 'limit' (the buyer's claims already fill the limit; the claim is
-- not recorded) or 'unknown' (no such product here); then the ids the
-- register holds for the buyer after the call.
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if not limit then return {'unknown'} end
local ids, seen = {}, {}
local function add(id)
  if id ~= '' and not seen[id] then seen[id] = true; ids[#ids + 1] = id end
end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then for id in string.gmatch(cur, '%S+') do add(id) end end
for i = 3, #ARGV do add(ARGV[i]) end
local status = 'ok'
if not seen[ARGV[2]] then
  if #ids >= limit then status = 'limit' else add(ARGV[2]) end
end
if #ids > 0 then redis.call('HSET', KEYS[2], ARGV[1], table.concat(ids, ' ')) end
local out = {status}
for i = 1, #ids do out[#out + 1] = ids[i] end
return out
