-- Shared by the wrk scripts (bench/create_pet.lua, bench/request.lua), which load it with
-- dofile: a microsecond clock (returned), the per-thread results the scripts fill in, and the
-- setup()/done() pair that prints them for bench/common.py as two lines:
-- "WRK_RESULT {json}" ("created" counts the answers the script expects) and
-- "WRK_LATENCIES_US ...". The scripts time each request themselves: wrk 4 "corrects" its own
-- latency statistics for coordinated omission, adding made-up samples behind every slow
-- response (one slow fsync becomes dozens), so its mean and percentiles are not the latencies
-- the requests had.

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

-- Per thread, global: done() reads them through thread:get().
latencies = {}  -- of the answers that count, in microseconds
created = 0     -- answers that count (the script says which)
failed = 0      -- the other answers

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

return now_us
