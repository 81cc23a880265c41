-- register: rebuild or repair the per-user limit register of a product on
-- a shard (shard/register.go). 'create' writes a register lost with the
-- shard's data, once (one that exists is never overwritten); 'merge' adds
-- to a register that came back without its last writes the claim ids it
-- lost (ids it holds stay), and takes out the ids given back since that
-- the shard's crash put back (an id written '-' first: its order was
-- cancelled or failed, so its claim is gone for good).
-- A register of many buyers is written in several calls, each short (a
-- long script would hold the shard up): the limit ('#'), which makes the
-- register usable, is written by the last one only.
-- KEYS[1] claims hash
-- ARGV[1] 'create' or 'merge'  ARGV[2] per-user limit  ARGV[3] 'last' or
-- 'more', then pairs: user id, the space-separated ids of the units that
-- user holds (locked or sold) and, '-' first, the ids given back
-- Returns 1 when written, 0 when a 'create' found the register there.
if ARGV[1] == 'create' and redis.call('HEXISTS', KEYS[1], '#') == 1 then return 0 end
for i = 4, #ARGV - 1, 2 do
  local user = ARGV[i]
  local seen, list, drop = {}, {}, {}
  local function add(x)
    if not seen[x] then seen[x] = true; list[#list + 1] = x end
  end
  local cur = redis.call('HGET', KEYS[1], user)
  if cur then
    for x in string.gmatch(cur, '%S+') do add(x) end
  end
  for x in string.gmatch(ARGV[i + 1], '%S+') do
    if string.sub(x, 1, 1) == '-' then drop[string.sub(x, 2)] = true else add(x) end
  end
  local keep = {}
  for _, x in ipairs(list) do
    if not drop[x] then keep[#keep + 1] = x end
  end
  if #keep == 0 then
    redis.call('HDEL', KEYS[1], user)
  else
    redis.call('HSET', KEYS[1], user, table.concat(keep, ' '))
  end
end
if ARGV[3] == 'last' then redis.call('HSET', KEYS[1], '#', ARGV[2]) end
return 1
