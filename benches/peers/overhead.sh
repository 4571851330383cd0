#!/usr/bin/env bash
# bakeoff against vllm-bench on vllm-bench's own overhead suite (its bench-overhead/ matrix and
# mock), side by side: client CPU (user + system of the whole process, start-up included, from
# the kernel's rusage of the exited child), peak RSS (the kernel's max RSS of it), and TTFT error
# against the mock's ground truth (it sends the first token 50 ms after a request, then 100
# tokens 10 ms apart). Median of TRIALS runs per client and level; the two clients alternate
# which goes first; client and mock are pinned to different cores. Prints one table per level
# with bakeoff / vllm-bench ratios (below 1.0: bakeoff spends less).
#
#   benches/peers/overhead.sh [--quick]
#
# Nothing is downloaded. The peer is found, in this order, as $VLLM_BENCH (its binary) and
# $VLLM_BENCH_MOCK (bench-overhead's mock-llm-server), or built with cargo from a checkout at
# $PEERS_DIR/vllm-bench (default /work/peers; `git clone https://github.com/vllm-project/vllm-bench`
# there yourself). Without it the script says so and exits 0: the side-by-side is skipped.
# bakeoff is $BAKEOFF, else target/release/bakeoff under $CARGO_TARGET_DIR or ./target.
#
# The machine should be quiet: other load moves both clients' CPU and TTFT. The script prints
# the 1-minute load average before each level so a noisy moment shows.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
peers="${PEERS_DIR:-/work/peers}"
trials="${TRIALS:-3}"
port="${PORT:-8089}"
url="http://127.0.0.1:${port}"
out="${OUT_DIR:-$(mktemp -d /tmp/bakeoff-overhead.XXXXXX)}"
mkdir -p "$out"

# vllm-bench's bench-overhead/run.sh matrix.
if [[ "${1:-}" == "--quick" ]]; then
    levels=(1 10 100); requests=(10 20 200)
else
    levels=(1 10 100 500 1000); requests=(50 100 200 500 1000)
fi
# Also c = 64, one token a chunk (the mock sends no other way), for tokens per client CPU-second
# (WITH_C64=0 leaves it out).
if [[ "${WITH_C64:-1}" != 0 ]]; then
    levels+=(64); requests+=(640)
fi

bakeoff="${BAKEOFF:-${CARGO_TARGET_DIR:-$repo/target}/release/bakeoff}"
if [[ ! -x "$bakeoff" ]]; then
    echo "no bakeoff binary at $bakeoff: build it with 'cargo build --release' or set BAKEOFF" >&2
    exit 1
fi

vllm_bench="${VLLM_BENCH:-$peers/target/release/vllm-bench}"
mock="${VLLM_BENCH_MOCK:-$peers/target-mock/release/mock-llm-server}"
checkout="$peers/vllm-bench"
if [[ ! -x "$vllm_bench" && -f "$checkout/Cargo.toml" ]]; then
    echo "== building vllm-bench from $checkout"
    (cd "$checkout" && cargo build --release --target-dir "$peers/target")
fi
if [[ ! -x "$mock" && -f "$checkout/bench-overhead/mock-server/Cargo.toml" ]]; then
    echo "== building vllm-bench's overhead mock from $checkout"
    (cd "$checkout/bench-overhead/mock-server" && cargo build --release --target-dir "$peers/target-mock")
fi
if [[ ! -x "$vllm_bench" || ! -x "$mock" ]]; then
    echo "vllm-bench or its overhead mock is absent (looked for $vllm_bench and $mock, and a"
    echo "checkout at $checkout): the side-by-side is skipped. Clone the peer there to run it."
    exit 0
fi

# Two cores: the mock on the first, each client on the second. One core: no pinning.
if command -v taskset >/dev/null && [[ "$(nproc)" -ge 2 ]]; then
    pin_mock=(taskset -c 0); pin_client=(taskset -c 1)
else
    pin_mock=(); pin_client=()
    echo "fewer than 2 cores or no taskset: client and mock are not pinned"
fi
# 1,000 concurrent connections need more than the usual 1,024 descriptors.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

mock_pid=""
stop_mock() {
    if [[ -n "$mock_pid" ]]; then
        kill "$mock_pid" 2>/dev/null || true
        wait "$mock_pid" 2>/dev/null || true
        mock_pid=""
    fi
}
trap stop_mock EXIT
start_mock() {
    "${pin_mock[@]}" "$mock" --port "$port" --token-interval-ms 10 --first-token-delay-ms 50 \
        --num-tokens 100 >"$out/mock.log" 2>&1 &
    mock_pid=$!
    for _ in $(seq 1 100); do
        curl -sf "$url/v1/models" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "the mock did not start: $(cat "$out/mock.log")" >&2
    exit 1
}

# One client run under /usr/bin/time: "user system maxrss_kb" lands in $1.time.
timed() {
    local stem="$1"; shift
    /usr/bin/time -f "%U %S %M" -o "$stem.time" "${pin_client[@]}" "$@" >"$stem.log" 2>&1 || {
        echo "failed: $* (see $stem.log)" >&2
        tail -5 "$stem.log" >&2
        return 1
    }
}

run_bakeoff() { # level requests stem
    timed "$3" "$bakeoff" measure --base-url "$url/v1" --model mock-model --api openai-completions \
        --concurrency "$1" --requests "$2" --warmup 0 --no-rollout --retries 0 \
        --prompt-tokens 32 --max-tokens 100 --json "$3.json"
}
run_vllm_bench() { # level requests stem
    mkdir -p "$3.dir"
    timed "$3" "$vllm_bench" --backend openai --base-url "$url" --model mock-model --tokenizer gpt2 \
        --dataset-name random --random-input-len 32 --random-output-len 100 \
        --num-prompts "$2" --max-concurrency "$1" --disable-tqdm --save-result --save-detailed \
        --result-dir "$3.dir" --result-filename result.json --ready-check-timeout-sec 10 \
        --num-warmups 0 --percentile-metrics ttft,tpot,itl,e2el
}

echo "== bakeoff: $bakeoff ($("$bakeoff" --version 2>/dev/null || echo '?'))"
echo "== vllm-bench: $vllm_bench"
echo "== results in $out; $trials trials per level"
for i in "${!levels[@]}"; do
    c="${levels[$i]}"; n="${requests[$i]}"
    echo "-- c=$c, $n requests (load average $(cut -d' ' -f1 /proc/loadavg))"
    stop_mock; start_mock
    for t in $(seq 1 "$trials"); do
        # Alternate which client goes first, so a drift of the machine hits both alike.
        if (( t % 2 )); then order=(bakeoff vllm_bench); else order=(vllm_bench bakeoff); fi
        for client in "${order[@]}"; do
            "run_$client" "$c" "$n" "$out/$client-c$c-t$t" || echo "  ($client, trial $t: left out of the table)"
        done
    done
    stop_mock
done

pairs=()
for i in "${!levels[@]}"; do pairs+=("${levels[$i]}:${requests[$i]}"); done
python3 "$here/overhead_table.py" "$out" "${pairs[@]}"
