#!/usr/bin/env bash
# Screenshots of the pages a team decides in — run page, archive, compare, scorecard — at 1400
# and 700 px wide (900 px tall: what is "above the fold"), from a fresh demo server.
#
#   scripts/ui-screenshots.sh BAKEOFF_BINARY OUT_DIR SUFFIX
#
# Starts `BAKEOFF_BINARY serve --demo` on a free loopback port with a new SQLite file, runs the
# demo eval set over every demo candidate twice (through the JSON API, default settings), waits
# for both runs and their verdicts, then saves OUT_DIR/{run,archive,compare,scorecard}-{1400,700}-SUFFIX.png
# with headless Chromium. docs/screenshots/ holds the "before" (main before issue 54) and
# "after" sets made this way.
set -euo pipefail
bin=$(realpath "$1")
out=$2
suffix=$3
mkdir -p "$out"
chromium=$(command -v chromium || command -v chromium-browser || command -v google-chrome)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
"$bin" serve --demo --listen "127.0.0.1:$port" --database-url "sqlite://$dir/bakeoff.db" >"$dir/log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 1 200); do curl -sf "$base/measure" >/dev/null && break; sleep 0.3; done
jar="$dir/cookies"
token=$(curl -s -c "$jar" "$base/measure" | grep -o '"X-CSRF-Token": "[0-9a-f]*"' | cut -d'"' -f4)
names=$(curl -s -b "$jar" "$base/api/v1/candidates" |
  python3 -c 'import json, sys; d = json.load(sys.stdin); d = d.get("items", d) if isinstance(d, dict) else d; print(json.dumps([c["name"] if "name" in c else c["spec"]["name"] for c in d]))')
runs=()
for n in 1 2; do
  id=$(curl -s -b "$jar" -H "X-CSRF-Token: $token" -H "Origin: $base" -H 'content-type: application/json' \
    -d "{\"name\": \"demo bake-off $n\", \"evalset\": \"support-ticket-triage\", \"candidates\": $names}" \
    "$base/api/v1/runs" | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("run_id", d.get("id")))')
  runs+=("$id")
done
for id in "${runs[@]}"; do
  for _ in $(seq 1 600); do
    status=$(curl -s -b "$jar" "$base/api/v1/runs/$id" | python3 -c 'import json, sys; print(json.load(sys.stdin)["status"])')
    [ "$status" = finished ] && break
    case "$status" in failed|cancelled) echo "run $id $status" >&2; exit 1;; esac
    sleep 0.5
  done
done
# The background judge stores verdicts once no run executes.
for _ in $(seq 1 120); do
  curl -s -b "$jar" "$base/archive" | grep -q 'class="saved-verdict"' && break
  sleep 0.5
done
shot() { # name path width
  "$chromium" --headless=new --no-sandbox --disable-gpu --hide-scrollbars --disable-dev-shm-usage \
    --window-size="$3,900" --screenshot="$out/$1-$3-$suffix.png" "$base$2" >/dev/null 2>&1
}
run=${runs[0]}
other=${runs[1]}
for w in 1400 700; do
  shot run "/runs/$run" "$w"
  shot archive "/archive" "$w"
  shot compare "/archive/compare?runs=$run,$other" "$w"
  shot scorecard "/runs/$run/scorecard" "$w"
done
ls "$out"/*-"$suffix".png
