-- budget: a token bucket shared by every coordinator (the cluster's order
-- creation rate), judged by the shard's clock.
-- KEYS[1] the bucket (a hash: tokens, ts)
-- ARGV[1] tokens per second  ARGV[2] burst  ARGV[3] tokens wanted
-- Returns the tokens granted now (0 to wanted).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if not tokens then tokens, ts = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local got = math.max(0, math.min(want, math.floor(tokens)))
tokens = tokens - got
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'ts', string.format('%.6f', now))
redis.call('PEXPIRE', KEYS[1], 60000)
return got
