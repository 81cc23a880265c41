-- ack: a consumer group's handled entries are acknowledged and removed from
-- their stream (the outboxes, the settle and payment streams), so a stream
-- holds only what is not processed yet.
-- KEYS[1] the stream  ARGV[1] the group  ARGV[2..] the handled entries' ids
-- Removing them one by one (XDEL) costs the master more than reading and
-- acknowledging them: each id is sought in its node and the node rewritten.
-- So the stream is trimmed instead, up to the first entry that may not be
-- processed: the group's oldest pending entry (delivered, not acknowledged:
-- another consumer's batch in progress, a parked entry), or the last entry
-- delivered (those after it are not read yet). Everything before that is
-- acknowledged, by this call or an earlier one. Only the ids given that are
-- at or past that point are deleted one by one (another consumer's batch
-- before them is still pending).
-- Returns {entries trimmed, entries deleted one by one}.
local stream, group = KEYS[1], ARGV[1]
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 or redis.call('EXISTS', stream) == 0 then return {0, 0} end
redis.call('XACK', stream, group, unpack(ids))

-- before(a, b): stream id a sorts before b (ids are "ms-seq", decimal).
local function num_before(x, y)
  if #x ~= #y then return #x < #y end
  return x < y
end
local function before(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if ams ~= bms then return num_before(ams, bms) end
  return num_before(aseq, bseq)
end

local last
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local name, delivered
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then delivered = g[i + 1] end
  end
  if name == group then last = delivered end
end
local bound = last
if bound then
  local oldest = redis.call('XPENDING', stream, group)[2]
  if oldest and oldest ~= false and before(oldest, bound) then bound = oldest end
end
local trimmed = 0
if bound then trimmed = redis.call('XTRIM', stream, 'MINID', bound) end
local rest = {}
for _, id in ipairs(ids) do
  if not bound or not before(id, bound) then rest[#rest + 1] = id end
end
if #rest > 0 then redis.call('XDEL', stream, unpack(rest)) end
return {trimmed, #rest}
