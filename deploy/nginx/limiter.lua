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
local M = {}
local counts = ngx.shared.shardstock_counts
local config = ngx.shared.shardstock_config

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

function M.check(product)
  refresh()
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
