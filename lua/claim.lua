-- claim (purchase.lua): take a claim in this per-user limit register.
-- KEYS[1] stock hash  KEYS[2] claims hash
-- ARGV[1] user id  ARGV[2] claim id (the reservation id)
-- ARGV[3..] claim ids the buyer's other register holds
-- Returns {status, id...}: the status, then the ids the register holds for
-- the buyer after the call ({'unknown'} when the product is not here).
local status, ids = claim(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV, 3)
local out = {status}
for i = 1, #ids do out[#out + 1] = ids[i] end
return out
