-- ack: a consumer group's handled entries are acknowledged and removed from
-- their stream (the outboxes, the settle and payment streams), so a stream
-- holds only what is not processed yet.
-- KEYS[1] the stream  ARGV[1] the group  ARGV[2..] the handled entries' ids,
-- in ascending order
-- Removing them one by one (XDEL) costs the master more than reading and
-- acknowledging them: each id is sought in its node and the node rewritten.
-- So the stream is trimmed instead, up to the first entry that may not be
-- processed: the entry after the last id given (a group delivers in id
-- order and ids only grow, so every entry before it was delivered; those
-- after it may not be), or the group's oldest pending entry if that is
-- older (delivered, not acknowledged: another consumer's batch in
-- progress, a parked entry, the last read of a coordinator that died).
-- Every entry before that point is acknowledged, by this call or an
-- earlier one. Only the ids given that are at or past it are deleted one by
-- one. (Ids out of order could only make the trim stop short: nothing
-- unprocessed is ever removed.)
-- Returns {entries trimmed, entries deleted one by one}.
local stream, group, n = KEYS[1], ARGV[1], #ARGV
if n < 2 or redis.call('EXISTS', stream) == 0 then return {0, 0} end
-- Trimming relies on the ids having been delivered by this group on this
-- stream: only when every one was pending here (XACK counts them) is that
-- sure. Otherwise (the shard lost its data and the group or the stream was
-- made anew, and new entries may sort below these ids; an id given twice)
-- the ids are deleted one by one, and nothing else.
local acked = redis.call('XACK', stream, group, unpack(ARGV, 2))

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

local first = 2 -- ARGV[first..n] are deleted one by one: all unless trimming is sure
local trimmed = 0
local pending = acked == n - 1 and redis.pcall('XPENDING', stream, group)
if type(pending) == 'table' and pending.err == nil then
  local bound = after(ARGV[n])
  first = n + 1
  local oldest = pending[2]
  if oldest and before(oldest, bound) then
    bound = oldest
    local lo, hi = 2, n + 1 -- the first id at or past bound
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if before(ARGV[mid], bound) then lo = mid + 1 else hi = mid end
    end
    first = lo
  end
  trimmed = redis.call('XTRIM', stream, 'MINID', bound)
end
if first <= n then redis.call('XDEL', stream, unpack(ARGV, first)) end
return {trimmed, n - first + 1}
