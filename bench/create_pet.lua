-- wrk script: every request is a createPet (POST /v1/pets with a NewPet body).
--
--   wrk -t1 -cN -dSs -s bench/create_pet.lua http://HOST:PORT/v1/pets -- API_KEY
--
-- It times each request itself instead of trusting wrk's latency statistics: wrk 4 "corrects"
-- those for coordinated omission, adding made-up samples behind every slow response (one slow
-- fsync becomes dozens of slow samples), so its mean and percentiles are not the latencies the
-- requests had. Each pet is named bench-<sequence number>; the 201 body echoes the name, which
-- pairs the response with its request even when many connections share the thread.
-- done() prints two lines for bench/common.py: "WRK_RESULT {json}" and "WRK_LATENCIES_US ...".

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
local sequence = 0
local sent_at = {}
latencies = {}  -- global: done() reads it through thread:get()
created = 0
failed = 0      -- answers other than 201, or a 201 that is not one of ours

function init(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. args[1]
end

function request()
  sequence = sequence + 1
  sent_at[sequence] = now_us()
  return wrk.format(nil, nil, nil, '{"name":"bench-' .. sequence .. '","categoryId":1}')
end

function response(status, headers, body)
  local received = now_us()
  local number = tonumber(body:match('"name":"bench%-(%d+)"'))
  local sent = number and sent_at[number]
  if status ~= 201 or not sent then
    failed = failed + 1
    return
  end
  sent_at[number] = nil
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
