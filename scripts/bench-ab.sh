#!/usr/bin/env bash
# Compares two builds of `tagma` side by side on this machine: the same benchmarks, run
# alternately, so that a noisy machine drifts over both alike. Prints the median of each
# figure per build.
#   scripts/bench-ab.sh OLD_TAGMA NEW_TAGMA [ROUNDS] [SUITE]
# SUITE: `mixed` (default: BFT 0 B, CFT 1 KiB, durable key-value puts) or `ordering` (the
# ordering targets: BFT and CFT 0/0 at 8, 64 and 256 clients, BFT 1 KiB at 256, durability).
# (build the old one from a worktree: git worktree add /tmp/old REV && cargo build --release
# --bin tagma --manifest-path /tmp/old/Cargo.toml)
set -euo pipefail
old=${1:?usage: bench-ab.sh OLD_TAGMA NEW_TAGMA [ROUNDS]}
new=${2:?usage: bench-ab.sh OLD_TAGMA NEW_TAGMA [ROUNDS]}
rounds=${3:-3}
suite=${4:-mixed}
out=$(mktemp -d)
run() { # label binary args...
  local label=$1 bin=$2
  shift 2
  "$bin" bench "$@" --json 2>/dev/null | tail -n 1 >>"$out/$label.jsonl"
}
for _ in $(seq "$rounds"); do
  for side in old new; do
    bin=$old
    [[ $side == new ]] && bin=$new
    if [[ $suite == ordering ]]; then
      run "bft-0B-c8.$side" "$bin" --payload 0 --clients 8 --no-baseline
      run "bft-0B-c64.$side" "$bin" --payload 0 --clients 64
      run "bft-0B-c256.$side" "$bin" --payload 0 --clients 256 --no-baseline
      run "cft-0B-c8.$side" "$bin" --cft --payload 0 --clients 8 --no-baseline
      run "cft-0B-c256.$side" "$bin" --cft --payload 0 --clients 256 --no-baseline
      run "bft-1KiB-c256.$side" "$bin" --payload 1024 --clients 256 --no-baseline
      run "bft-1KiB-fsync.$side" "$bin" --payload 1024 --durability fsync --no-baseline
    else
      run "bft-micro-0B.$side" "$bin" --payload 0
      run "cft-micro-1KiB.$side" "$bin" --cft --payload 1024
      run "bft-kv-1KiB-fsync.$side" "$bin" --workload kv --payload 1024 --durability fsync --no-baseline
    fi
  done
done
python3 - "$out" <<'PY'
import json, pathlib, statistics, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    figures = []
    for key in ("throughput_ops_s", "ratio_vs_unreplicated", "ratio_vs_no_durability", "cpu_s_per_kop"):
        values = [r[key] for r in rows if r.get(key)]
        if values:
            figures.append(f"{key} {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})")
    p50 = [r["latency_ms"]["p50"] for r in rows]
    figures.append(f"p50_ms {statistics.median(p50):.2f}")
    batch = [r["batch_mean"] for r in rows]
    figures.append(f"batch_mean {statistics.median(batch):.1f}")
    print(f"{f.stem:28} n={len(rows)}  " + "  ".join(figures))
PY
rm -r "$out"
