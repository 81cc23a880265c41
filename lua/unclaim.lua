-- unclaim: give a claim back (the purchase attempt ended without a unit).
-- KEYS[1] claims hash
-- ARGV[1] user id  ARGV[2] claim id
-- Returns 1 if the claim was removed, 0 if the register did not hold it.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
local keep, found = {}, 0
for id in string.gmatch(cur, '%S+') do
  if id == ARGV[2] then found = 1 else keep[#keep + 1] = id end
end
if #keep == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], table.concat(keep, ' '))
end
return found
