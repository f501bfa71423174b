#!/usr/bin/env bash
# Scripts/fuzz api: schemathesis against a real `marquee serve` (see Scripts/fuzz). Run from Scripts/fuzz.
# Environment: FUZZ_MAX_EXAMPLES (cases per operation, default 50), FUZZ_VENV (default .build/fuzz-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
examples=${FUZZ_MAX_EXAMPLES:-50}
venv=${FUZZ_VENV:-.build/fuzz-venv}
[[ "$venv" = /* ]] && root=""

Scripts/bootstrap
if [[ ! -x "$venv/bin/schemathesis" ]]; then
  echo "fuzz: installing schemathesis into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet schemathesis
fi
swift build --product marquee >/dev/null
marquee="$(swift build --show-bin-path)/marquee"

pg_dir=""
work=$(mktemp -d /tmp/marquee-fuzz.XXXXXX)
serve_pid=""
simulator_pid=""
cleanup() {
  [[ -n "$serve_pid" ]] && kill "$serve_pid" 2>/dev/null || true
  [[ -n "$simulator_pid" ]] && kill "$simulator_pid" 2>/dev/null || true
  [[ -n "$pg_dir" ]] && Scripts/pg stop "$pg_dir"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
eval "$(Scripts/pg start --fast)"
pg_dir=$MARQUEE_PG_DIR
export MARQUEE_DATABASE_URL

"$marquee" migrate >/dev/null
key=$("$marquee" key create --scope admin --name fuzz --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])')
# The APNs simulator, whose signing key the app uses.
"$marquee" simulator --state "$work/simulator" --bundle-id com.example.fuzz >"$work/simulator.out" 2>"$work/simulator.log" &
simulator_pid=$!
for _ in $(seq 1 300); do
  grep -q 'for marquee:' "$work/simulator.out" 2>/dev/null && break
  sleep 0.1
done
grep -q 'for marquee:' "$work/simulator.out" || { echo "fuzz api: the simulator did not start" >&2; cat "$work/simulator.log" >&2; exit 1; }
signing=$(grep 'signing key:' "$work/simulator.out")
key_file=$(sed -n 's/.*signing key: \(.*\) (key id.*/\1/p' <<<"$signing")
key_id=$(sed -n 's/.*(key id \([A-Z0-9]*\),.*/\1/p' <<<"$signing")
team_id=$(sed -n 's/.*team id \([A-Z0-9]*\)).*/\1/p' <<<"$signing")
simulator_env=$(sed -n 's/.*for marquee: //p' "$work/simulator.out")
simulator_setting() { tr ' ' '\n' <<<"$simulator_env" | sed -n "s/^$1=//p"; }
# One app and one attribute type, so generated ids and names sometimes hit real rows.
"$marquee" app add --bundle com.example.fuzz --environment development --team-id "$team_id" --key-id "$key_id" \
  --key-file "$key_file" >/dev/null

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
"$marquee" serve --listen "127.0.0.1:$port" --log-level warning --apns-push-url "$(simulator_setting MARQUEE_APNS_PUSH_URL)" \
  --apns-manage-url "$(simulator_setting MARQUEE_APNS_MANAGE_URL)" --apns-ca-file "$(simulator_setting MARQUEE_APNS_CA_FILE)" \
  2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS -X POST "http://127.0.0.1:$port/v1/attribute-types" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"app": 1, "name": "MatchAttributes", "attributes": {"homeTeam": "string"}, "contentState": {"homeScore": "int"}}' >/dev/null
# An event and an installation that follows it, so the registry's routes meet real rows too.
curl -fsS -X POST "http://127.0.0.1:$port/v1/events" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"app": 1, "externalId": "fuzz-match", "kind": "match", "attributeType": "MatchAttributes", "attributes": {"homeTeam": "A"},
       "contentState": {"homeScore": 0}, "startsAt": "2030-01-01T12:00:00Z", "topics": ["team:a"]}' >/dev/null
curl -fsS -X PUT "http://127.0.0.1:$port/v1/installations/fuzz-phone" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"app": 1, "pushToStartToken": "'"$(printf 'ab%.0s' $(seq 1 32))"'", "osVersion": "18.2"}' >/dev/null
curl -fsS -X PUT "http://127.0.0.1:$port/v1/installations/fuzz-phone/follows" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"events": [{"externalId": "fuzz-match"}], "topics": ["team:a"]}' >/dev/null

echo "fuzz api: schemathesis, $examples examples per operation, against 127.0.0.1:$port"
status=0
# From the work folder, so schemathesis' cache folder does not land in the repository.
(cd "$work" && "$root/$venv/bin/schemathesis" run "http://127.0.0.1:$port/openapi.json" --url "http://127.0.0.1:$port" \
  -H "Authorization: Bearer $key" --checks not_a_server_error --max-examples "$examples" \
  --no-color) || status=$?

if ! kill -0 "$serve_pid" 2>/dev/null; then
  echo "fuzz api: marquee serve died during the run" >&2
  cat "$work/serve.log" >&2
  exit 1
fi
kill -TERM "$serve_pid"
serve_status=0
wait "$serve_pid" || serve_status=$?
serve_pid=""
if grep -q '"level":"error"\|level=error' "$work/serve.log"; then
  echo "fuzz api: the server logged errors:" >&2
  grep 'level=error\|"level":"error"' "$work/serve.log" | head -20 >&2
  status=1
fi
if [[ $serve_status -ne 0 ]]; then
  echo "fuzz api: marquee serve exited $serve_status after SIGTERM" >&2
  status=1
fi
[[ $status -eq 0 ]] && echo "fuzz api: passed (no 5xx, no crash, clean shutdown)"
exit $status
