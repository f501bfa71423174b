# Scripts/chaos overload, sourced by Scripts/chaos once PostgreSQL, the simulator and serve are up and every event's
# channel is open: back-pressure (docs/operations.md#back-pressure). wrk (pinned with taskset to the last CPU) posts
# updates to the events at random, first closed-loop with twice as many connections as serve's API pool
# (--max-connections, 16) to measure the rate serve and PostgreSQL sustain, then, in the same run, at 5 times that rate
# (many connections, each pausing between requests; at most 8000). It prints, per phase: the rate offered and accepted, the shed share
# (429 and 503, each of which must carry Retry-After), the p99 of accepted work (the 202s' durations in serve's own
# request log) next to wrk's p99 of every answer, serve's peak RSS (VmHWM), the generator's own CPU; and the time the
# pipeline took to drain after the burst (outbox empty, no update pending). It exits 1 when a refusal lacked
# Retry-After, an answer was neither 202, 429 nor 503, or an accepted update is missing or left pending.
# shellcheck shell=bash

generator_cpu=$(($(nproc) - 1))
ids=$(paste -sd, "$work/events")
vm_hwm() { awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$serve_pid/status"; }
drain_left() {
  sql -c "SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM updates WHERE disposition = 'pending')" 2>/dev/null || echo '?'
}
wait_drained() {  # prints the seconds it took (at most 300)
  local from=$EPOCHREALTIME
  for _ in $(seq 3000); do
    [[ "$(drain_left)" == 0 ]] && break
    sleep 0.1
  done
  awk -v a="$from" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}
phase() {  # label connections pause_ms: one wrk run; its JSON line in $work/wrk.LABEL.json, serve's log of it in serve.LABEL.log
  local label=$1 connections=$2 pause=$3 offset
  offset=$(stat -c %s "$serve_log")
  /usr/bin/time -f '%U %S %e' -o "$work/wrk.$label.cpu" taskset -c "$generator_cpu" wrk -t 1 -c "$connections" \
    -d "${overload_seconds}s" --timeout 30s -s Scripts/chaos.d/overload.lua "$api" -- "$ingest_key" "$ids" "$pause" \
    >"$work/wrk.$label.out" 2>&1 || fail "wrk failed" "$work/wrk.$label.out"
  grep '^{' "$work/wrk.$label.out" | tail -n 1 >"$work/wrk.$label.json"
  [[ -s "$work/wrk.$label.json" ]] || fail "wrk printed no figures" "$work/wrk.$label.out"
  tail -c +$((offset + 1)) "$serve_log" >"$work/serve.$label.log"
}
accepted_p99() {  # the p99 (ms) of the 202s' durations in a phase's serve log
  grep -E 'msg=request .*status=202' "$1" | sed -n 's/.*duration_ms=\([0-9.]*\).*/\1/p' | sort -n \
    | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit } i = int(NR * 0.99); if (i < 1) i = 1; print v[i] }'
}
report_phase() {  # label title
  local json=$work/wrk.$1.json cpu
  read -r user system elapsed <"$work/wrk.$1.cpu"
  cpu=$(awk -v u="$user" -v s="$system" -v e="$elapsed" 'BEGIN { printf "%.1f s of CPU in %.1f s (%.0f %% of one core)", u + s, e, 100 * (u + s) / e }')
  jq -r --arg title "$2" --arg p99 "$(accepted_p99 "$work/serve.$1.log")" --arg cpu "$cpu" --arg rss "$(vm_hwm)" '
    (.s429 + .s503) as $shed | ($shed + .s202 + .other) as $answered |
    "overload: \($title): offered \(.requests / .seconds | floor)/s, accepted \(.s202 / .seconds | floor)/s; " +
    "shed \(if $answered > 0 then ($shed * 1000 / $answered | floor) / 10 else 0 end) % (429: \(.s429), 503: \(.s503), " +
    "with Retry-After: \(.retry_after)), other answers \(.other), socket errors \(.errors); p99 of accepted work \($p99) ms " +
    "(serve), p99 of every answer \(.p99_ms) ms (wrk); serve peak RSS \($rss) MiB; the generator: \($cpu)"' "$json"
}

pool_connections=16
sustain_connections=$((2 * pool_connections))
say "overload: measuring the sustainable rate (wrk closed-loop, $sustain_connections connections, ${overload_seconds} s, pinned to CPU $generator_cpu)"
phase sustain "$sustain_connections" 0
sustained=$(jq '.s202 / .seconds | floor' "$work/wrk.sustain.json")
((sustained > 0)) || fail "nothing was accepted while measuring the sustainable rate" "$serve_log"
sustain_drain=$(wait_drained)
report_phase sustain "sustainable rate (closed loop, $sustain_connections connections)"
echo "overload: drained ${sustain_drain} s after the sustained phase"

target=$((5 * sustained))
# Each connection's cycle is its pause plus the answer's latency (about 150 ms on average when most are refused and
# the rest wait up to --max-queue-wait): connections = 0.4 x target with a pause of 400 - 150 ms offer it, unless
# serve's answers (refusals included) slow down more than that; the rate offered is printed.
burst_connections=$(( target * 4 / 10 > 8000 ? 8000 : (target * 4 / 10 < 64 ? 64 : target * 4 / 10) ))
pause=$(( burst_connections * 1000 / target - 150 ))
((pause >= 0)) || pause=0
say "overload: offering 5 x $sustained = $target updates/s ($burst_connections connections, $pause ms between requests) for ${overload_seconds} s"
phase burst "$burst_connections" "$pause"
burst_end=$EPOCHREALTIME
burst_drain=$(wait_drained)
report_phase burst "5x the sustainable rate (target $target/s, $burst_connections connections)"
echo "overload: drained (outbox empty, no update pending) ${burst_drain} s after the burst"

# ---- the checks: refusals say when to come back; every accepted update is stored and settled
failed=0
for label in sustain burst; do
  read -r refused with_retry other <<<"$(jq -r '"\(.s429 + .s503) \(.retry_after) \(.other)"' "$work/wrk.$label.json")"
  ((refused == with_retry)) || { echo "overload: $label: $((refused - with_retry)) refusals without Retry-After" >&2; failed=1; }
  ((other == 0)) || { echo "overload: $label: $other answers neither 202, 429 nor 503" >&2; failed=1; }
done
answered=$(jq -s 'map(.s202) | add' "$work/wrk.sustain.json" "$work/wrk.burst.json")
stored=$(sql -c "SELECT count(*) FROM updates u JOIN events e ON e.id = u.event_id WHERE e.app_id = $app AND u.action = 'update'")
left=$(drain_left)
if ((stored >= answered)) && [[ "$left" == 0 ]]; then
  echo "overload: every accepted update is stored ($stored stored, $answered answered 202) and settled; the outbox is empty"
else
  echo "overload: LOST: $answered updates answered 202, $stored stored, $left outbox rows or pending updates left" >&2
  failed=1
fi
(($(jq '.s429 + .s503' "$work/wrk.burst.json") > 0)) || echo "overload: note: nothing was shed at 5x (the sustained phase was not the limit)" >&2
exit "$failed"
