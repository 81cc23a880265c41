-- shardstock edge limiter for nginx (libnginx-mod-http-lua).
-- Purchases are counted per second, globally and per product, in shared
-- memory (one fixed window per second, shared by all workers). The limits
-- come from the coordinators: GET /edge/limits answers lines
--   global N
--   product ID N
-- fetched at most once a second through the internal /_edge_config
-- location. A request over a limit is answered 429 here and never reaches a
-- coordinator. Without a config (no coordinator answered yet) nothing is
-- limited at the edge; the coordinators still apply their own limits.
--
-- Waiting rooms: the coordinators also publish "queue ID N" (every place
-- up to N is admitted within a second or two). With SHARDSTOCK_QUEUE_SECRET
-- in nginx's environment (the coordinators' key), a purchase of a queued
-- product must carry an X-Queue-Token this edge can verify (HS256, the
-- product's, not expired) with a place up to N, or it is answered 403
-- not_admitted here. The coordinator still checks everything (the buyer,
-- the exact turn, a revocation); the edge turns away what cannot pass.
local M = {}
local counts = ngx.shared.shardstock_counts
local config = ngx.shared.shardstock_config
local secret = os.getenv("SHARDSTOCK_QUEUE_SECRET")
if secret == "" then secret = nil end

-- hmac256 is HMAC-SHA-256 from the OpenSSL that nginx links (LuaJIT FFI).
local ffi = require("ffi")
ffi.cdef[[
typedef struct evp_md_st EVP_MD;
const EVP_MD *EVP_sha256(void);
unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len,
                    const unsigned char *d, size_t n, unsigned char *md, unsigned int *md_len);
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

-- place is the place a valid token gives in product's line, or nil.
local function place(token, product)
  if not token then return nil end
  local h, p, sig = string.match(token, "^([%w_-]+)%.([%w_-]+)%.([%w_-]+)$")
  if not h then return nil end
  local want = hmac256(secret, h .. "." .. p)
  local got = unb64url(sig)
  if not got or #got ~= #want then return nil end
  local diff = 0 -- compare in constant time
  for i = 1, #want do diff = bit.bor(diff, bit.bxor(string.byte(want, i), string.byte(got, i))) end
  if diff ~= 0 then return nil end
  local claims = unb64url(p)
  if not claims then return nil end
  -- Signed by a coordinator (Go's encoding/json): plain fields.
  local pid = string.match(claims, '"pid":"([^"]*)"')
  local pos = tonumber(string.match(claims, '"pos":(%d+)'))
  local exp = tonumber(string.match(claims, '"exp":(%d+)'))
  if pid ~= product or not pos or not exp or exp < ngx.time() then return nil end
  return pos
end

local function refresh()
  local at = config:get("fetched_at")
  if at and ngx.now() - at < 1 then return end
  config:set("fetched_at", ngx.now())
  local res = ngx.location.capture("/_edge_config")
  if not res or res.status ~= 200 then
    ngx.log(ngx.WARN, "shardstock edge: no limits from the coordinators (status ", res and res.status, ")")
    return
  end
  local seen = {}
  for line in string.gmatch(res.body, "[^\n]+") do
    local kind, a, b = string.match(line, "^(%a+)%s+(%S+)%s*(%S*)$")
    if kind == "global" then
      config:set("global", tonumber(a))
      seen["global"] = true
    elseif kind == "product" and tonumber(b) then
      config:set("p:" .. a, tonumber(b))
    elseif kind == "queue" and tonumber(b) then
      config:set("q:" .. a, tonumber(b), 10) -- gone with its line, 10 s after the last word of it
    end
  end
  if not seen["global"] then config:delete("global") end
end

-- over counts one request against key's window of this second and reports
-- whether it goes past limit.
local function over(key, limit)
  if not limit or limit <= 0 then return false end
  local n, err = counts:incr(key .. ":" .. math.floor(ngx.now()), 1, 0, 2)
  if not n then
    ngx.log(ngx.ERR, "shardstock edge: counter: ", err)
    return false
  end
  return n > limit
end

local function refuse(msg)
  ngx.status = 403
  ngx.header["Content-Type"] = "application/json"
  ngx.say('{"error":"not_admitted","message":"', msg, ' (edge)"}')
  return ngx.exit(403)
end

function M.check(product)
  refresh()
  local serving = secret and config:get("q:" .. product)
  if serving then
    local pos = place(ngx.var.http_x_queue_token, product)
    if not pos then
      return refuse("this product sells through a waiting room: join it and send your place as X-Queue-Token")
    elseif pos == 0 or pos > serving then
      return refuse("not your turn yet")
    end
  end
  local scope
  if over("p:" .. product, config:get("p:" .. product)) then
    scope = "product"
  elseif over("global", config:get("global")) then
    scope = "global"
  end
  if scope then
    ngx.status = 429
    ngx.header["Retry-After"] = "1"
    ngx.header["Content-Type"] = "application/json"
    ngx.say('{"error":"rate_limited","message":"too many requests (edge ', scope, ' limit), retry later"}')
    return ngx.exit(429)
  end
end

return M
