-- claim_reserve (purchase.lua): the buyer's claim in this register and, only
-- when it is granted, the reserve on this same shard: one call where a
-- purchase would otherwise make two (see shard/claim.go).
-- KEYS[1] stock hash  KEYS[2] claims hash  KEYS[3] holds hash
-- KEYS[4] buyers hash  KEYS[5] outbox stream
-- ARGV[1] user id  ARGV[2] reservation id (also the claim id)
-- ARGV[3] now, unix ms  ARGV[4] this shard's index  ARGV[5] product id
-- ARGV[6] unix ms the sale window is checked at ('': now)
-- ARGV[7..] claim ids the buyer's other register holds
-- Returns {claim status, reserve status ('' when the claim was not
-- granted), id...}: the ids are those the register holds for the buyer.
local status, ids = claim(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV, 7)
local r = ''
if status == 'ok' then
  r = reserve({KEYS[1], KEYS[3], KEYS[4], KEYS[5]}, ARGV[2], ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
end
local out = {status, r}
for i = 1, #ids do out[#out + 1] = ids[i] end
return out
