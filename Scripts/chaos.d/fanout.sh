# Scripts/chaos fanout, sourced by Scripts/chaos once PostgreSQL, the simulator (playing the followers' devices) and
# serve are up: one event, its followers imported, a manual start run, serve SIGKILLed and restarted while it sends.
# What it counts (docs/operations.md#the-start-fan-out):
#   - per kill: the starts settled `unknown` because their holder was gone (reason holder_lost), by the window they
#     were marked in (sent_at before that kill), next to the requests the simulator held unanswered when serve's
#     connections dropped (inFlightAtDisconnect before and after the kill);
#   - devices started twice for the event: the simulator's device report (`duplicates`), which must be 0;
#   - followers neither accepted nor counted: the run's audience less every start it settled, which must be 0.
# shellcheck shell=bash

control="http://127.0.0.1:$control_port"
admin() {  # method path [body]: the answer's body; fails the phase on a non-2xx answer
  local status
  status=$(curl -sS -o "$work/answer" -w '%{http_code}' -X "$1" "$api$2" -H "Authorization: Bearer $admin_key" \
    -H 'Content-Type: application/json' ${3:+--data-binary "$3"}) || fail "$1 $2: no answer" "$serve_log"
  [[ "$status" == 2* ]] || fail "$1 $2 answered $status: $(cat "$work/answer")" "$serve_log"
  cat "$work/answer"
}
simulator_in_flight() { curl -fsS "$control/status" | jq '.inFlightAtDisconnect // 0'; }
iso() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }

starts_at=$(($(date +%s) + 3600))
event=$(admin POST /v1/events "$(jq -nc --argjson app "$app" --arg starts "$(iso "$starts_at")" \
  --arg ends "$(iso $((starts_at + 7200)))" '{
    app: $app, externalId: "chaos-fanout", kind: "match", attributeType: "ChaosAttributes", attributes: {name: "Chaos"},
    contentState: {seq: 0, minute: 0, homeScore: 0, awayScore: 0}, startsAt: $starts, endsAt: $ends,
    startAlert: {title: "Kick-off", body: "The match starts"}}')" | jq -r .id)
"$marquee" installation import "$work/installations.csv" --app "$app" --json >"$work/import.json" \
  || fail "the followers' import failed" "$work/import.json"
say "event $event with $(jq .follows "$work/import.json") followers imported; waiting for its channel"
for _ in $(seq 600); do
  [[ "$(sql -c "SELECT count(*) FROM channels WHERE event_id = $event AND state = 'open'")" == 1 ]] && break
  sleep 0.1
done
[[ "$(sql -c "SELECT count(*) FROM channels WHERE event_id = $event AND state = 'open'")" == 1 ]] \
  || fail "the event's channel did not open within 60 s" "$serve_log"

window=$("$marquee" serve --help | sed -n 's/.*--start-send-window N.*\[default: \([0-9]*\)\].*/\1/p')
run=$(admin POST "/v1/events/$event/starts" '{}' | jq -r .id)
startable=$(sql -c "SELECT count(*) FROM installations WHERE app_id = $app AND os_major >= 17")
say "start run $run: $startable startable followers; serve is killed $faults times while it sends"
report() { admin GET "/v1/events/$event/starts" | jq -c --argjson run "$run" '.runs[] | select(.id == $run)'; }

: >"$work/kills.tsv"
for ((fault = 1; fault <= faults; fault++)); do
  due=$((startable * fault / (faults + 1)))
  until (($(report | jq '.counts.accepted') >= due)); do
    kill -0 "$serve_pid" 2>/dev/null || fail "marquee serve died" "$serve_log"
    [[ "$(report | jq -r .state)" == running ]] || break
    sleep 0.05
  done
  before=$(simulator_in_flight)
  at=$(now)
  kill -KILL "$serve_pid"
  wait "$serve_pid" 2>/dev/null || true
  sleep 1  # the simulator sees the connections close
  after=$(simulator_in_flight)
  start_serve
  say "fault $fault of $faults: serve SIGKILLed with $(report | jq '.counts.accepted') starts accepted; $((after - before)) requests were in flight"
  echo "$fault $at $((after - before))" >>"$work/kills.tsv"
done

say "waiting for the run's first pass to end"
for _ in $(seq 1800); do
  [[ "$(report | jq -r .state)" == running ]] || break
  sleep 0.2
done
[[ "$(report | jq -r .state)" != running ]] || fail "the run did not end its first pass within 6 minutes" "$serve_log"
report >"$work/run.json"
curl -fsS "$control/devices" >"$work/devices-report.json"
sql -F ' ' -c "SELECT extract(epoch FROM sent_at) FROM starts WHERE run_id = $run AND reason = 'holder_lost'" >"$work/unknown-sent-at"

python3 - "$work" "$window" "$json" <<'PY'
import json, sys
work, window, as_json = sys.argv[1], int(sys.argv[2] or 0), sys.argv[3] == "1"
run = json.load(open(f"{work}/run.json"))
devices = json.load(open(f"{work}/devices-report.json"))
kills = [line.split() for line in open(f"{work}/kills.tsv") if line.strip()]
sent = sorted(float(line) for line in open(f"{work}/unknown-sent-at") if line.strip())
counts = run["counts"]
settled = (counts["accepted"] + counts["unknown"] + sum(counts["rejected"].values()) + sum(counts["skipped"].values())
           + counts["notStartable"])
missing = counts["audience"] - settled
per_kill, previous = [], 0.0
for index, at, in_flight in kills:
    at = float(at)
    unknown = sum(1 for t in sent if previous < t <= at)
    per_kill.append({"kill": int(index), "unknown": unknown, "inFlight": int(in_flight)})
    previous = at
duplicates = devices.get("duplicates", 0)
figures = {"audience": counts["audience"], "accepted": counts["accepted"], "unknown": counts["unknown"],
           "planned": counts["planned"], "sending": counts["sending"], "neitherAcceptedNorCounted": missing,
           "devicesStartedTwice": duplicates, "sendWindow": window, "kills": per_kill}
if as_json:
    print(json.dumps(figures))
else:
    print(f"fan-out: {counts['audience']} followers, {counts['accepted']} accepted, {counts['unknown']} unknown, "
          f"{counts['notStartable']} not startable, {sum(counts['skipped'].values())} skipped")
    for kill in per_kill:
        bound = kill["inFlight"] + window
        print(f"  kill {kill['kill']}: {kill['unknown']} unknown, {kill['inFlight']} in flight at the simulator "
              f"(target: at most in flight + one window of {window} = {bound}: {'met' if kill['unknown'] <= bound else 'NOT met'}; "
              f"at most 500: {'met' if kill['unknown'] <= 500 else 'NOT met'})")
    print(f"  devices started twice: {duplicates} (must be 0)")
    print(f"  followers neither accepted nor counted: {missing} (must be 0)")
sys.exit(1 if duplicates or missing else 0)
PY
exit $?
