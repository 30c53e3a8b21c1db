-- wrk script for bench/run.py and bench/durability.py: one kind of request again and again, each one timed.
--
--   wrk -t1 -cN -dSs -s bench/request.lua http://HOST:PORT -- KEY STATUS METHOD PATH [IDS]
--
-- KEY goes out as `Authorization: Bearer KEY`; STATUS is the answer that counts as a success
-- (200, or 401 for the refused scenario). When IDS is given, PATH holds "{id}" and each
-- request asks for the next of the ids 1..IDS in turn (getPet).
--
-- wrk's Lua API does not say which connection a response came in on, so a response is paired
-- with its request:
--   * with IDS, by the id in the body ({"id":N,...}): exact;
--   * otherwise first in, first out: the oldest request still unanswered. The servers are
--     single-threaded event loops that answer in the order requests arrive, so this is the
--     request it answers; should two answers overtake each other, their two latencies are
--     swapped, and the mean stays exact whatever happens. Against exact pairing on getPet,
--     FIFO agreed within about 4% at p50 and 1% at p99 (it can't see a single request that
--     waits while later ones are answered).

-- The clock, the results and done(): bench/timing.lua, next to this script.
local now_us = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "timing.lua")

-- Per thread (each wrk thread runs its own copy of this script).
local expected, method, path, ids, fixed
local sequence = 0
local fifo, head = {}, 1   -- send times in order, and the oldest unanswered
local by_id = {}           -- id -> list of send times, oldest first

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  expected = tonumber(args[2])
  method, path = args[3], args[4]
  ids = tonumber(args[5] or "0")
  if ids == 0 then
    -- A fixed request: formatted once.
    fixed = wrk.format(method, path)
  end
end

function request()
  sequence = sequence + 1
  local sent = now_us()
  if ids == 0 then
    fifo[sequence] = sent
    return fixed
  end
  local id = (sequence - 1) % ids + 1
  local waiting = by_id[id]
  if waiting then
    waiting[#waiting + 1] = sent
  else
    by_id[id] = { sent }
  end
  return wrk.format(method, (path:gsub("{id}", tostring(id))))
end

function response(status, headers, body)
  local received = now_us()
  local sent
  if ids == 0 then
    sent = fifo[head]
    fifo[head] = nil
    head = head + 1
  else
    local id = tonumber(body:match('^{"id":(%d+)'))
    local waiting = id and by_id[id]
    if waiting and #waiting > 0 then
      sent = table.remove(waiting, 1)
    end
  end
  if status ~= expected or not sent then
    failed = failed + 1
    return
  end
  created = created + 1
  latencies[created] = received - sent
end
