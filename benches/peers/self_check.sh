#!/usr/bin/env bash
# How often bakeoff's self-check is right: RUNS quiet runs (the false-positive rate: runs flagged
# UNRELIABLE although nothing disturbed the client) and RUNS runs whose client is stopped for
# STALL_MS in the middle of its load with SIGSTOP/SIGCONT (the detection rate: runs flagged with a
# figure the stall moved). Both against `bakeoff mock` in its own process (first token 20 ms,
# then 40 tokens 5 ms apart, one a chunk), c = 8, 64 requests a run; client and mock pinned to
# different cores when there are two.
#
#   benches/peers/self_check.sh            # RUNS=20 STALL_MS=100 by default
#
# bakeoff is $BAKEOFF, else target/release/bakeoff under $CARGO_TARGET_DIR or ./target.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
runs="${RUNS:-20}"
stall_ms="${STALL_MS:-100}"
bakeoff="${BAKEOFF:-${CARGO_TARGET_DIR:-$repo/target}/release/bakeoff}"
[[ -x "$bakeoff" ]] || { echo "no bakeoff binary at $bakeoff (cargo build --release, or set BAKEOFF)" >&2; exit 1; }
out="${OUT_DIR:-$(mktemp -d /tmp/bakeoff-self-check.XXXXXX)}"
mkdir -p "$out"
if command -v taskset >/dev/null && [[ "$(nproc)" -ge 2 ]]; then
    pin_mock=(taskset -c 0); pin_client=(taskset -c 1)
else
    pin_mock=(); pin_client=()
fi

cat >"$out/profiles.toml" <<'TOML'
[[model]]
name = "paced"
ttft_ms = 20
inter_token_ms = 5
TOML
"${pin_mock[@]}" "$bakeoff" mock --listen 127.0.0.1:0 --profiles "$out/profiles.toml" >"$out/mock.log" 2>&1 &
mock_pid=$!
trap 'kill $mock_pid 2>/dev/null || true; wait $mock_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    grep -q "^listening on " "$out/mock.log" 2>/dev/null && break
    sleep 0.1
done
base="$(sed -n 's/^listening on \(.*\)$/\1/p' "$out/mock.log" | head -1)/v1"

measure() { # json-file
    "${pin_client[@]}" "$bakeoff" measure --base-url "$base" --model paced --api openai-chat \
        --concurrency 8 --requests 64 --warmup 0 --no-rollout --retries 0 --prompt-tokens 16 \
        --max-tokens 40 --ignore-eos --json "$1" >"$1.log" 2>&1
}

for i in $(seq 1 "$runs"); do
    measure "$out/quiet-$i.json"
    measure "$out/stall-$i.json" &
    client=$!
    # Stop the client once its load is under way (it has said "measuring …"), at a varying
    # moment of the ~1.8 s load.
    until grep -q "^measuring " "$out/stall-$i.json.log" 2>/dev/null; do sleep 0.02; done
    sleep "0.$((2 + i % 7))"
    kill -STOP "$client"; sleep "$(printf '0.%03d' "$stall_ms")"; kill -CONT "$client"
    wait "$client" || true
done

python3 - "$out" "$runs" "$stall_ms" <<'PY'
import json, sys
out, runs, stall = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def verdict(path):
    doc = json.load(open(path))
    h = doc.get("harness") or {}
    moved = [s for s in h.get("figure_shifts", []) if s["shift_ms"] > s["bound_ms"]]
    return bool(h.get("unreliable")), moved, h.get("reasons", [])
quiet = [verdict(f"{out}/quiet-{i}.json") for i in range(1, runs + 1)]
stall_runs = [verdict(f"{out}/stall-{i}.json") for i in range(1, runs + 1)]
fp = sum(1 for u, _, _ in quiet if u)
det = sum(1 for u, moved, _ in stall_runs if u and moved)
print(f"quiet runs flagged (false positives): {fp} of {runs} = {100 * fp / runs:.1f} %")
for u, _, reasons in quiet:
    if u:
        print("   ", "; ".join(reasons))
print(f"runs with a {stall} ms client stall flagged with a moved figure: {det} of {runs} = {100 * det / runs:.1f} %")
for u, moved, reasons in stall_runs:
    print("   ", "; ".join(reasons) if u else "NOT FLAGGED")
PY
