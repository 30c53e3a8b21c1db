-- wrk script for bench/run.py: one kind of request again and again, each one timed.
--
--   wrk -t1 -cN -dSs -s bench/request.lua http://HOST:PORT -- KEY STATUS METHOD PATH [IDS]
--
-- KEY goes out as `Authorization: Bearer KEY`; STATUS is the answer that counts as a success
-- (200, or 401 for the refused scenario). When IDS is given, PATH holds "{id}" and each
-- request asks for the next of the ids 1..IDS in turn (getPet).
--
-- As bench/create_pet.lua does, it times each request itself, because wrk 4 "corrects" its own
-- latency statistics for coordinated omission with made-up samples. wrk's Lua API does not
-- say which connection a response came in on, so a response is paired with its request:
--   * with IDS, by the id in the body ({"id":N,...}): exact;
--   * otherwise first in, first out: the oldest request still unanswered. The servers are
--     single-threaded event loops that answer in the order requests arrive, so this is the
--     request it answers; should two answers overtake each other, their two latencies are
--     swapped, and the mean stays exact whatever happens.
-- done() prints two lines in the format of create_pet.lua, which bench/common.py reads:
-- "WRK_RESULT {json}" ("created" counts answers with STATUS) and "WRK_LATENCIES_US ...".

local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock_id, bench_timespec *now);
]]
local CLOCK_MONOTONIC = 1
local clock = ffi.new("bench_timespec")

local function now_us()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, clock)
  return tonumber(clock.tv_sec) * 1e6 + tonumber(clock.tv_nsec) / 1e3
end

-- Per thread (each wrk thread runs its own copy of this script).
local expected, method, path, ids, fixed
local sequence = 0
local fifo, head = {}, 1   -- send times in order, and the oldest unanswered
local by_id = {}           -- id -> list of send times, oldest first
latencies = {}  -- global: done() reads it through thread:get()
created = 0
failed = 0      -- answers other than STATUS

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

-- In the main script state: collect every thread's numbers once the run is over.
local threads = {}

function setup(thread)
  threads[#threads + 1] = thread
end

function done(summary, latency, requests)
  local all, total_created, total_failed = {}, 0, 0
  for _, thread in ipairs(threads) do
    total_created = total_created + thread:get("created")
    total_failed = total_failed + thread:get("failed")
    for _, value in ipairs(thread:get("latencies")) do
      all[#all + 1] = string.format("%.1f", value)
    end
  end
  local errors = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"created":%d,"failed":%d,"duration_us":%d,"connect_errors":%d,'
      .. '"read_errors":%d,"write_errors":%d,"timeouts":%d}\n',
    summary.requests, total_created, total_failed, summary.duration, errors.connect,
    errors.read, errors.write, errors.timeout))
  io.write("WRK_LATENCIES_US ", table.concat(all, " "), "\n")
end
