-- ack: a consumer group's handled entries are acknowledged and removed from
-- their stream (the outboxes, the settle and payment streams), so a stream
-- holds only what is not processed yet.
-- KEYS[1] the stream  ARGV[1] the group  ARGV[2..] the handled entries' ids
-- Removing them one by one (XDEL) costs the master more than reading and
-- acknowledging them: each id is sought in its node and the node rewritten.
-- So the stream is trimmed instead, up to the first entry that may not be
-- processed: the group's oldest pending entry (delivered, not acknowledged:
-- another consumer's batch in progress, a parked entry), or the entry after
-- the last one given (those after it may not be read yet). Everything before that is
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

-- after(id): the least id after id (the sequence part plus one, in decimal).
local function after(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  local digits, i = {}, #seq
  for c in string.gmatch(seq, '%d') do digits[#digits + 1] = tonumber(c) end
  while i >= 1 and digits[i] == 9 do digits[i] = 0; i = i - 1 end
  if i >= 1 then digits[i] = digits[i] + 1 else table.insert(digits, 1, 1) end
  return ms .. '-' .. table.concat(digits)
end

-- Every entry up to the last id given was delivered to the group (a group
-- delivers in id order, and ids only grow), so the entries before it that
-- are not pending are acknowledged.
local last = ids[1]
for _, id in ipairs(ids) do
  if before(last, id) then last = id end
end
local bound
local pending = redis.pcall('XPENDING', stream, group)
if type(pending) == 'table' and pending.err == nil then
  bound = after(last)
  local oldest = pending[2]
  if oldest and before(oldest, bound) then bound = oldest end
end -- else the group is gone: the ids given are deleted one by one
local trimmed = 0
if bound then trimmed = redis.call('XTRIM', stream, 'MINID', bound) end
local rest = {}
for _, id in ipairs(ids) do
  if not bound or not before(id, bound) then rest[#rest + 1] = id end
end
if #rest > 0 then redis.call('XDEL', stream, unpack(rest)) end
return {trimmed, #rest}
