-- shardstock edge limiter for nginx (libnginx-mod-http-lua).
--
-- A purchase passes these checks in order, cheapest first, and is counted
-- against a budget only once it has passed the ones before:
--
--   1. the client address's rate (per_ip a second);
--   2. the buyer's bearer token, verified here with the coordinators' key
--      (SHARDSTOCK_HMAC_SECRET in nginx's environment): no valid token,
--      401 here, counted against nothing else;
--   3. the buyer's rate (per_buyer a second);
--   4. for a product sold through a waiting room (SHARDSTOCK_QUEUE_SECRET
--      in nginx's environment): a place (X-Queue-Token) signed by the
--      coordinators for this buyer and product, not revoked, whose turn has
--      come and is not over, or 403 here;
--   5. the product's budget and the global one, published by the
--      coordinators.
--
-- Every rate is a sliding window over the last second (this second's
-- count plus the last second's, weighted by how much of it is still in
-- the window), shared by all workers. A request turned away by a check is
-- counted neither there nor by the checks after it: a flood spends its own
-- address's or buyer's allowance, never the budgets everyone shares. The coordinators still check everything
-- (the exact turn, the per-user limit, their own rates); the edge turns
-- away what cannot pass, before it costs them anything.
--
-- The limits come from the coordinators: GET /edge/limits answers lines
--   global N
--   product ID N
--   queue ID N          (places up to N may be admitted)
--   passed ID P W       (a place up to P whose buyer joined W ms or more
--                        ago has had its turn)
--   revoked ID BUYER
-- fetched at most once a second through the internal /_edge_config
-- location. Without a config (no coordinator answered yet) no budget or
-- waiting room is checked here; the coordinators still check their own.
local M = {}
local counts = ngx.shared.shardstock_counts
local config = ngx.shared.shardstock_config

local function env(name)
  local v = os.getenv(name)
  if v == "" then return nil end
  return v
end
local queue_key = env("SHARDSTOCK_QUEUE_SECRET")
local buyer_key = env("SHARDSTOCK_HMAC_SECRET")
if not buyer_key then
  ngx.log(ngx.WARN, "shardstock edge: SHARDSTOCK_HMAC_SECRET is not set: buyers' tokens are not checked here, ",
    "and only the per-address rate stands before the product budgets")
end

-- hmac256 is HMAC-SHA-256 from the OpenSSL that nginx links (LuaJIT FFI).
local ffi = require("ffi")
ffi.cdef[[
typedef struct evp_md_st EVP_MD;
const EVP_MD *EVP_sha256(void);
unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len,
                    const unsigned char *d, size_t n, unsigned char *md, unsigned int *md_len);
int prctl(int option, unsigned long arg2, unsigned long arg3, unsigned long arg4, unsigned long arg5);
]]
local crypto = ffi.C
if not pcall(function() return crypto.EVP_sha256 end) then
  crypto = ffi.load("libcrypto.so.3")
end
local mdbuf, mdlen = ffi.new("unsigned char[32]"), ffi.new("unsigned int[1]")
local function hmac256(key, data)
  crypto.HMAC(crypto.EVP_sha256(), key, #key, data, #data, mdbuf, mdlen)
  return ffi.string(mdbuf, mdlen[0])
end

local function unb64url(s)
  s = string.gsub(string.gsub(s, "-", "+"), "_", "/")
  local pad = #s % 4
  if pad == 2 then s = s .. "==" elseif pad == 3 then s = s .. "=" elseif pad == 1 then return nil end
  return ngx.decode_base64(s)
end

-- claims are the claims (JSON text) of token, a JWT signed with key by
-- HS256 for audience aud, issued by the coordinators and not expired; nil
-- for anything else. Only the coordinators hold key, and they write claims
-- with Go's encoding/json: plain fields, read here by pattern.
-- leeway: seconds of clock difference allowed, as the coordinators allow
-- (buyers' tokens 30, places 5).
local function claims(token, key, aud, leeway)
  if not token then return nil end
  local h, p, sig = string.match(token, "^([%w_-]+)%.([%w_-]+)%.([%w_-]+)$")
  if not h then return nil end
  local header = unb64url(h)
  if not header or not string.find(header, '"alg":"HS256"', 1, true) then return nil end
  local want = hmac256(key, h .. "." .. p)
  local got = unb64url(sig)
  if not got or #got ~= #want then return nil end
  local diff = 0 -- compare in constant time
  for i = 1, #want do diff = bit.bor(diff, bit.bxor(string.byte(want, i), string.byte(got, i))) end
  if diff ~= 0 then return nil end
  local c = unb64url(p)
  if not c then return nil end
  local exp = tonumber(string.match(c, '"exp":(%d+)'))
  if not exp or exp + leeway < ngx.time() then return nil end
  if not string.find(c, '"iss":"shardstock"', 1, true) then return nil end
  -- (aud as Go's jwt writes it: a list, or one string)
  if not string.find(c, '"aud":["' .. aud .. '"]', 1, true) and not string.find(c, '"aud":"' .. aud .. '"', 1, true) then return nil end
  return c
end

-- buyer is the user a valid buyer token (Authorization: Bearer) names, or
-- nil. As the coordinators: issued no later than now (with leeway), living
-- at most a day, its subject 1-64 of [A-Za-z0-9_-].
local function buyer()
  local auth = ngx.var.http_authorization
  local raw = auth and string.match(auth, "^[Bb][Ee][Aa][Rr][Ee][Rr] +(%S+)%s*$")
  local c = claims(raw, buyer_key, "shardstock-buyers", 30)
  if not c then return nil end
  local iat, exp = tonumber(string.match(c, '"iat":(%d+)')), tonumber(string.match(c, '"exp":(%d+)'))
  if not iat or iat > ngx.time() + 30 or exp - iat > 86400 then return nil end
  local sub = string.match(c, '"sub":"([%w_-]+)"')
  if not sub or #sub > 64 then return nil end
  return sub
end

-- place is the place, its holder and their join time (Unix ms) of a valid
-- place token in product's line, or nil. With user (the buyer this edge
-- verified) only user's own place is taken; with none (no buyer key here)
-- any buyer's, and the coordinator checks whose it is.
local function place(token, product, user)
  local c = claims(token, queue_key, "shardstock-queue", 5)
  if not c or string.match(c, '"pid":"([^"]*)"') ~= product then return nil end
  local sub = string.match(c, '"sub":"([^"]*)"')
  if not sub or (user and sub ~= user) then return nil end
  local pos = tonumber(string.match(c, '"pos":(%d+)'))
  if not pos then return nil end
  return pos, sub, tonumber(string.match(c, '"jat":(%d+)')) or 0
end

-- put stores a config entry and says so loudly when the store had to
-- evict others for it (a limit silently lost would let a flood through).
local function put(key, value, ttl)
  local ok, err, forcible = config:set(key, value, ttl or 0)
  if not ok then
    ngx.log(ngx.ERR, "shardstock edge: the config store cannot keep ", key, ": ", err, " (raise lua_shared_dict shardstock_config)")
  elseif forcible then
    ngx.log(ngx.ERR, "shardstock edge: the config store is full and dropped entries for ", key,
      ": limits may be missing (raise lua_shared_dict shardstock_config)")
  end
end

local function refresh()
  local at = config:get("fetched_at")
  if at and ngx.now() - at < 1 then return end
  put("fetched_at", ngx.now())
  local res = ngx.location.capture("/_edge_config")
  if not res or res.status ~= 200 then
    ngx.log(ngx.WARN, "shardstock edge: no limits from the coordinators (status ", res and res.status, ")")
    return
  end
  local seen = {}
  for line in string.gmatch(res.body, "[^\n]+") do
    local kind, a, b, c = string.match(line, "^(%a+)%s+(%S+)%s*(%S*)%s*(%S*)$")
    if kind == "global" then
      put("global", tonumber(a))
      seen["global"] = true
    elseif kind == "product" and tonumber(b) then
      put("p:" .. a, tonumber(b))
    elseif kind == "queue" and tonumber(b) then
      put("q:" .. a, tonumber(b), 10) -- gone with its line, 10 s after the last word of it
    elseif kind == "passed" and tonumber(b) and tonumber(c) then
      -- Gone 2 s after the last word of it: the coordinators allow an
      -- edge's copy and clock together 5 s (waitroom.EdgeSkew), so a copy
      -- kept longer while fetches fail could end a turn early.
      put("x:" .. a, b .. " " .. c, 2)
    elseif kind == "revoked" and b ~= "" then
      put("r:" .. a .. ":" .. b, true, 10)
    end
  end
  if not seen["global"] then config:delete("global") end
end

-- full says, at most once a second per worker, that the counters' store
-- is evicting counts to make room (limits then reset early): raise
-- lua_shared_dict shardstock_counts.
local said = 0
local function full()
  if ngx.now() - said >= 1 then
    said = ngx.now()
    ngx.log(ngx.ERR, "shardstock edge: the counters' store is full and drops counts (raise lua_shared_dict shardstock_counts)")
  end
end

-- take counts one request against key's sliding window of a second if it
-- stays within limit, and reports whether it did; over the limit nothing
-- is counted.
local function take(key, limit)
  if not limit or limit <= 0 then return true end
  local now = ngx.now()
  local sec = math.floor(now)
  local this = key .. ":" .. sec
  local n, err, forcible = counts:incr(this, 1, 0, 3)
  if not n then
    ngx.log(ngx.ERR, "shardstock edge: counter: ", err)
    return true
  end
  if forcible then full() end
  local last = counts:get(key .. ":" .. (sec - 1)) or 0
  if n + last * (1 - (now - sec)) > limit then
    counts:incr(this, -1)
    return false
  end
  return true
end

-- give takes back a request take counted (one that a later check refused).
local function give(key)
  counts:incr(key .. ":" .. math.floor(ngx.now()), -1, 1, 3)
end

local function answer(status, code, msg)
  ngx.status = status
  if status == 429 then ngx.header["Retry-After"] = "1" end
  ngx.header["Content-Type"] = "application/json"
  ngx.say('{"error":"', code, '","message":"', msg, ' (edge)"}')
  return ngx.exit(status)
end

-- gate holds a request to its client address's and its buyer's rates (a
-- second), after checking the buyer's token when this edge has the key.
-- It answers 429 or 401 here and returns false, or returns true and the
-- buyer (nil: not known here).
local function gate(per_ip, per_buyer)
  if not take("a:" .. ngx.var.binary_remote_addr, per_ip) then
    answer(429, "rate_limited", "too many requests from your address, retry later")
    return false
  end
  if not buyer_key then return true, nil end
  local user = buyer()
  if not user then
    answer(401, "unauthorized", "a valid bearer token is required")
    return false
  end
  if not take("b:" .. user, per_buyer) then
    answer(429, "rate_limited", "too many requests from you, retry later")
    return false
  end
  return true, user
end

-- queue holds a waiting room's joins and looks to the same rates as
-- purchases (a script looking as fast as it could made 2,200 looks a
-- second through the edge).
function M.queue(per_ip, per_buyer)
  gate(per_ip, per_buyer)
end

-- harden makes this worker not dumpable (init_worker_by_lua): nginx
-- makes its workers dumpable again after it drops root, so any process of
-- the workers' user could read their memory and environment, and with them
-- the keys (SHARDSTOCK_QUEUE_SECRET mints places the coordinators take).
-- Not dumpable, their /proc files are root's.
local PR_SET_DUMPABLE = 4
function M.harden()
  if ffi.C.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) ~= 0 then
    ngx.log(ngx.ERR, "shardstock edge: prctl(PR_SET_DUMPABLE, 0) failed: ", ffi.errno())
  end
end

-- check admits a purchase of product or answers it here; per_ip and
-- per_buyer are the rates a second one client address and one buyer get.
function M.check(product, per_ip, per_buyer)
  refresh()
  local ok, user = gate(per_ip, per_buyer)
  if not ok then return end
  local serving = queue_key and config:get("q:" .. product)
  if serving then
    local pos, holder, joined = place(ngx.var.http_x_queue_token, product, user)
    if not pos then
      return answer(403, "not_admitted", "this product sells through a waiting room: join it and send your place as X-Queue-Token")
    elseif config:get("r:" .. product .. ":" .. holder) then
      return answer(403, "revoked", "your place in this waiting room was revoked")
    elseif pos == 0 or pos > serving then
      return answer(403, "not_admitted", "not your turn yet")
    end
    local passed = config:get("x:" .. product)
    local upto, window = string.match(passed or "", "^(%d+) (%d+)$")
    if upto and pos <= tonumber(upto) and joined + tonumber(window) <= ngx.now() * 1000 then
      return answer(403, "not_admitted", "your turn (place " .. pos .. ") passed")
    end
  end
  if not take("p:" .. product, config:get("p:" .. product)) then
    return answer(429, "rate_limited", "too many requests for this product, retry later")
  end
  if not take("global", config:get("global")) then
    give("p:" .. product)
    return answer(429, "rate_limited", "too many requests, retry later")
  end
end

return M
