-- register: rebuild or repair the per-user limit register of a product on
-- a shard (shard/register.go). 'create' writes a register lost with the
-- shard's data, once (one that exists is never overwritten); 'merge' adds
-- to a register that came back without its last writes the claim ids it
-- lost (ids it holds stay).
-- A register of many buyers is written in several calls, each short (a
-- long script would hold the shard up): the limit ('#'), which makes the
-- register usable, is written by the last one only.
-- KEYS[1] claims hash
-- ARGV[1] 'create' or 'merge'  ARGV[2] per-user limit  ARGV[3] 'last' or
-- 'more', then pairs: user id, the space-separated ids of the units that
-- user holds (locked or sold)
-- Returns 1 when written, 0 when a 'create' found the register there.
if ARGV[1] == 'create' and redis.call('HEXISTS', KEYS[1], '#') == 1 then return 0 end
for i = 4, #ARGV - 1, 2 do
  local user, ids = ARGV[i], ARGV[i + 1]
  local cur = redis.call('HGET', KEYS[1], user)
  if cur then
    local seen = {}
    for x in string.gmatch(cur, '%S+') do seen[x] = true end
    for x in string.gmatch(ids, '%S+') do
      if not seen[x] then cur = cur .. ' ' .. x; seen[x] = true end
    end
    ids = cur
  end
  redis.call('HSET', KEYS[1], user, ids)
end
if ARGV[3] == 'last' then redis.call('HSET', KEYS[1], '#', ARGV[2]) end
return 1
