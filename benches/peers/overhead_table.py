#!/usr/bin/env python3
"""The table of benches/peers/overhead.sh: per level, each client's median over trials of client
CPU-s (user + system of the whole process), output tokens per CPU-s, peak RSS, mean TTFT error
against the mock's 50 ms, and max ITL; then bakeoff / vllm-bench ratios. Standard library only.

    overhead_table.py RESULTS_DIR CONCURRENCY:REQUESTS...
"""
import glob
import json
import os
import statistics
import sys

FIRST_TOKEN_MS = 50.0  # the overhead mock's ground truth (--first-token-delay-ms 50)
TOKENS_PER_REQUEST = 100  # --num-tokens 100, one a chunk


def usage(stem):
    """(cpu_s, peak_rss_mb) from /usr/bin/time's "%U %S %M" line."""
    with open(stem + ".time") as f:
        line = [l for l in f.read().splitlines() if l.strip()][-1]
    user, system, rss_kb = line.split()[:3]
    return float(user) + float(system), int(rss_kb) / 1024.0


def bakeoff_timing(stem):
    """(mean TTFT ms, max ITL ms, unreliable, reasons) from `bakeoff measure --json`."""
    with open(stem + ".json") as f:
        doc = json.load(f)
    level = doc["levels"][0]
    harness = doc.get("harness") or {}
    return (
        level["ttft_ms"]["mean"],
        level["itl_ms"]["max"],
        harness.get("unreliable"),
        harness.get("reasons", []),
    )


def vllm_bench_timing(stem):
    """(mean TTFT ms, max ITL ms) from vllm-bench's --save-detailed JSON (seconds inside)."""
    with open(os.path.join(stem + ".dir", "result.json")) as f:
        doc = json.load(f)
    ttfts = [t for t in doc["ttfts"] if t and t > 0]
    itls = [i for per_request in doc["itls"] for i in per_request]
    return statistics.mean(ttfts) * 1000.0, max(itls) * 1000.0, None, []


def trial(client, stem):
    cpu, rss = usage(stem)
    ttft, itl_max, unreliable, reasons = (bakeoff_timing if client == "bakeoff" else vllm_bench_timing)(stem)
    return {"cpu": cpu, "rss": rss, "ttft_err": ttft - FIRST_TOKEN_MS, "itl_max": itl_max,
            "unreliable": unreliable, "reasons": reasons}


def main():
    out = sys.argv[1]
    levels = [tuple(int(x) for x in arg.split(":")) for arg in sys.argv[2:]]
    header = (f"{'c':>5} {'client':<11} {'CPU-s':>7} {'tok/CPU-s':>10} {'peak MB':>8} "
              f"{'TTFT err ms':>11} {'max ITL ms':>10}  flagged")
    print(header)
    print("-" * len(header))
    ratios = []
    for c, requests in levels:
        med = {}
        for client in ("bakeoff", "vllm_bench"):
            trials = []
            for stem in sorted(glob.glob(os.path.join(out, f"{client}-c{c}-t*.time"))):
                try:
                    trials.append(trial(client, stem[: -len(".time")]))
                except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
                    print(f"  {stem}: unreadable ({e})")
            if not trials:
                continue
            m = {k: statistics.median(t[k] for t in trials) for k in ("cpu", "rss", "ttft_err", "itl_max")}
            med[client] = m
            flagged = ""
            if client == "bakeoff":
                n = sum(1 for t in trials if t["unreliable"])
                flagged = f"{n} of {len(trials)}"
            per_cpu = requests * TOKENS_PER_REQUEST / m["cpu"] if m["cpu"] > 0 else float("nan")
            print(f"{c:>5} {client.replace('_', '-'):<11} {m['cpu']:>7.3f} {per_cpu:>10,.0f} {m['rss']:>8.1f} "
                  f"{m['ttft_err']:>11.2f} {m['itl_max']:>10.2f}  {flagged}")
        if len(med) == 2:
            b, v = med["bakeoff"], med["vllm_bench"]
            ratios.append((c, b["cpu"] / v["cpu"], b["rss"] / v["rss"], b["ttft_err"], v["ttft_err"]))
    print()
    print("bakeoff / vllm-bench (median of trials; <= 1.0 is the target)")
    print(f"{'c':>5} {'CPU':>6} {'peak RSS':>9} {'TTFT err (ms) bakeoff vs vllm-bench':>37}")
    for c, cpu, rss, tb, tv in ratios:
        print(f"{c:>5} {cpu:>5.2f}x {rss:>8.2f}x {tb:>21.2f} vs {tv:.2f}")


if __name__ == "__main__":
    main()
