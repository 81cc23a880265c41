-- wrk script: every request is a purchase by a new buyer. X-User-ID is
-- unique per thread and request, and per run when the run passes a prefix
-- after "--" (deploy/bench.sh passes a new one to every wrk run: buyers of
-- an earlier run are at their per-user limit, so reusing their ids measures
-- limit answers instead of purchases).
local counter = 0
local tid = 0
local threads = 0
local prefix = "w"

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  tid = tonumber(wrk.thread:get("tid")) or 0
  if args[1] then prefix = args[1] end
end

function request()
  counter = counter + 1
  return wrk.format("POST", nil, { ["X-User-ID"] = prefix .. tid .. "-" .. counter })
end
