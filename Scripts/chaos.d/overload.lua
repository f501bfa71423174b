-- Scripts/chaos.d/overload.lua: wrk's script for Scripts/chaos overload. Each request posts a whole content state to
-- POST /v1/events/{id}/updates of an event picked at random; each connection waits `delay` ms before its next request,
-- so connections / (delay + latency) is the rate offered (wrk 4.1 has no fixed-rate mode; shed answers are fast, so the
-- rate holds under overload). Arguments (after --): the ingest key, the event ids (comma-separated), the delay in ms.
-- At the end it prints one JSON line: the answers by status and wrk's latency percentiles (every answer, shed or not).
local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  key = args[1]
  events = {}
  for id in string.gmatch(args[2], "[^,]+") do table.insert(events, id) end
  pause = tonumber(args[3]) or 0
  math.randomseed(id * 7919 + os.time())
  seq = 0
  c202, c429, c503, cother, retry_after = 0, 0, 0, 0, 0
end

function request()
  seq = seq + 1
  local event = events[math.random(#events)]
  local body = string.format(
    '{"contentState":{"seq":%d,"minute":%d,"homeScore":%d,"awayScore":%d,"lastEvent":"overload %d-%d"}}',
    seq, seq % 90, seq % 7, seq % 5, id, seq)
  return wrk.format("POST", "/v1/events/" .. event .. "/updates",
    {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}, body)
end

function delay()
  return pause
end

function response(status, headers, body)
  if status == 202 then c202 = c202 + 1
  elseif status == 429 then c429 = c429 + 1
  elseif status == 503 then c503 = c503 + 1
  else cother = cother + 1 end
  if (status == 429 or status == 503) and (headers["Retry-After"] or headers["retry-after"]) then retry_after = retry_after + 1 end
end

function done(summary, latency, requests)
  local t = {c202 = 0, c429 = 0, c503 = 0, cother = 0, retry_after = 0}
  for _, thread in ipairs(threads) do
    for name, _ in pairs(t) do t[name] = t[name] + (thread:get(name) or 0) end
  end
  io.write(string.format(
    '{"seconds":%.3f,"requests":%d,"errors":%d,"s202":%d,"s429":%d,"s503":%d,"other":%d,"retry_after":%d,' ..
    '"p50_ms":%.2f,"p99_ms":%.2f,"max_ms":%.2f}\n',
    summary.duration / 1e6, summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    t.c202, t.c429, t.c503, t.cother, t.retry_after,
    latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3))
end
