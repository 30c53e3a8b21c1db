-- wrk script: every request is a createPet (POST /v1/pets with a NewPet body).
--
--   wrk -t1 -cN -dSs -s bench/create_pet.lua http://HOST:PORT/v1/pets -- API_KEY [keyed]
--
-- Each pet is named bench-<sequence number>; the 201 body echoes the name, which pairs the
-- response with its request even when many connections share the thread. With "keyed", each
-- create carries an Idempotency-Key never used before (the run's start in microseconds and the
-- sequence number), so that every request is a keyed create, not a replay.

-- The clock, the results and done(): bench/timing.lua, next to this script.
local now_us = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "timing.lua")

-- Per thread (each wrk thread runs its own copy of this script).
local sequence = 0
local sent_at = {}
local key_prefix

function init(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  if args[2] == "keyed" then
    key_prefix = string.format("%d-", now_us())
  end
end

function request()
  sequence = sequence + 1
  sent_at[sequence] = now_us()
  local body = '{"name":"bench-' .. sequence .. '","categoryId":1}'
  if not key_prefix then
    return wrk.format(nil, nil, nil, body)
  end
  -- wrk.format takes these headers instead of wrk.headers: all of them, and the key.
  local headers = { ["Idempotency-Key"] = key_prefix .. sequence }
  for name, value in pairs(wrk.headers) do
    headers[name] = value
  end
  return wrk.format(nil, nil, headers, body)
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
