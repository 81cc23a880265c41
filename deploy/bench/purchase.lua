-- wrk script: every request is a purchase by a new buyer (X-User-ID unique
-- per thread and request).
local counter = 0
local tid = 0
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  tid = tonumber(wrk.thread:get("tid")) or 0
end

function request()
  counter = counter + 1
  return wrk.format("POST", nil, { ["X-User-ID"] = "w" .. tid .. "-" .. counter })
end
