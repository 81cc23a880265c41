-- transfer_out: take up to N salable units off this shard for a transfer,
-- once per transfer id. alloc and salable drop together, so conservation
-- holds on this shard; the units are in flight until transfer_in adds them
-- on the other shard (never before: a crash between the two steps loses no
-- unit for good and creates none — the transfer record says how many).
-- KEYS[1] stock hash  KEYS[2] transfers hash of this shard
-- ARGV[1] transfer id  ARGV[2] units wanted  ARGV[3] destination shard
-- ARGV[4] mode: '' takes up to N; 'exact' (a resync replaying a transfer
-- whose count SQL has: inventory/resync.go) takes exactly N or nothing.
-- Returns the units taken (a repeat returns the first answer), -1 when the
-- product is not on this shard, -2 when 'exact' found fewer than N salable.
local done = redis.call('HGET', KEYS[2], ARGV[1])
if done then return tonumber(string.match(done, '^out (%d+)')) end
local salable = tonumber(redis.call('HGET', KEYS[1], 'salable'))
if not salable then return -1 end
local want = tonumber(ARGV[2])
local n = math.max(0, math.min(want, salable))
if ARGV[4] == 'exact' and n < want then return -2 end
if n > 0 then -- (Lua writes -0 for 0, which HINCRBY refuses)
  redis.call('HINCRBY', KEYS[1], 'salable', -n)
  redis.call('HINCRBY', KEYS[1], 'alloc', -n)
end
redis.call('HSET', KEYS[2], ARGV[1], 'out ' .. n .. ' ' .. ARGV[3])
return n
