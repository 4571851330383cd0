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
    # `$client` is the subshell running `measure`: stop bakeoff itself, its child.
    pids=("$client" $(pgrep -P "$client" || true))
    kill -STOP "${pids[@]}"; sleep "$(printf '0.%03d' "$stall_ms")"; kill -CONT "${pids[@]}"
    wait "$client" || true
done

python3 - "$out" "$runs" "$stall_ms" <<'PY'
import json, statistics, sys
out, runs, stall = sys.argv[1], int(sys.argv[2]), sys.argv[3]
FIGURES = [(f, q) for f in ("ttft_ms", "e2e_ms", "itl_ms") for q in ("p50", "p90", "p99")]
def load(path):
    doc = json.load(open(path))
    h = doc.get("harness") or {}
    level = doc["levels"][0]
    figures = {(f, q): level[f][q] for f, q in FIGURES if level.get(f) and level[f].get(q) is not None}
    return bool(h.get("unreliable")), h.get("reasons", []), figures
quiet = [load(f"{out}/quiet-{i}.json") for i in range(1, runs + 1)]
stalled = [load(f"{out}/stall-{i}.json") for i in range(1, runs + 1)]
# The truth of each figure: its median over the quiet runs; a figure "moved" when a run reports
# it further from that than the self-check's bound (max(1 ms, 1 %)) plus three median absolute
# deviations of the quiet runs (the mock's and the machine's own jitter, robust to the odd quiet
# run that did lag).
truth, spread = {}, {}
for key in FIGURES:
    values = [fig[key] for _, _, fig in quiet if key in fig]
    if values:
        truth[key] = statistics.median(values)
        spread[key] = 3 * statistics.median(abs(v - truth[key]) for v in values)
def moved(fig):
    out = []
    for key, v in fig.items():
        if key in truth and abs(v - truth[key]) > max(1.0, 0.01 * truth[key]) + spread[key]:
            out.append(f"{key[0][:-3].upper()} {key[1]} {v:.2f} ms vs {truth[key]:.2f}")
    return out
flagged = [(reasons, moved(fig)) for u, reasons, fig in quiet if u]
fp = sum(1 for _, m in flagged if not m)
print(f"quiet runs flagged: {len(flagged)} of {runs}; of those, with no figure moved (false positives): "
      f"{fp} of {runs} = {100 * fp / runs:.1f} %")
for reasons, m in flagged:
    print(f"    moved {', '.join(m) or 'none'}; flag: {'; '.join(reasons)}")
counts = {"flagged, a figure moved": 0, "flagged, no figure moved beyond bound": 0,
          "not flagged, no figure moved": 0, "NOT FLAGGED ALTHOUGH A FIGURE MOVED": 0}
print(f"runs with a {stall} ms client stall (truth: the quiet runs' median of each figure):")
for u, reasons, fig in stalled:
    m = moved(fig)
    kind = ("flagged, a figure moved" if m else "flagged, no figure moved beyond bound") if u else \
        ("NOT FLAGGED ALTHOUGH A FIGURE MOVED" if m else "not flagged, no figure moved")
    counts[kind] += 1
    print(f"    {kind}: moved {', '.join(m) or 'none'}" + (f"; flag: {'; '.join(reasons)}" if u else ""))
for kind, n in counts.items():
    print(f"  {kind}: {n} of {runs}")
missed = counts["NOT FLAGGED ALTHOUGH A FIGURE MOVED"]
print(f"detection (stalls that moved a figure, flagged): {runs - missed - counts['not flagged, no figure moved'] - counts['flagged, no figure moved beyond bound']} of "
      f"{runs - counts['not flagged, no figure moved'] - counts['flagged, no figure moved beyond bound']}")
PY
