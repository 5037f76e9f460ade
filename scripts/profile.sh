#!/usr/bin/env bash
# Profiles a saturated local cluster: where the CPU of the whole machine goes, by stage of the
# ordering pipeline, per consensus instance and per request, with a flame graph.
#   scripts/profile.sh OUT_DIR [tagma bench flags...]      (default flags: --clients 64)
# Needs `perf` (linux-perf / linux-tools) and inferno (`cargo install inferno`). Builds
# `tagma` with frame pointers (so that perf can walk Rust stacks) in target/profiling, runs
# `tagma bench --no-baseline --json` with the flags given, samples every CPU for 10 s of its
# window at 997 Hz, and writes OUT_DIR/{bench.json,folded,flame.svg,stages.md}.
set -euo pipefail
out=${1:?usage: profile.sh OUT_DIR [tagma bench flags...]}
shift
flags=("$@")
[[ ${#flags[@]} -eq 0 ]] && flags=(--clients 64)
root=$(cd "$(dirname "$0")/.." && pwd)
for tool in perf inferno-collapse-perf inferno-flamegraph; do
  command -v "$tool" >/dev/null || {
    echo "error: $tool not found (apt-get install linux-perf; cargo install inferno)" >&2
    exit 1
  }
done
mkdir -p "$out"
RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release --bin tagma \
  --manifest-path "$root/Cargo.toml" --target-dir "$root/target/profiling"
tagma="$root/target/profiling/release/tagma"
"$tagma" bench --no-baseline --json --warmup-s 2 --duration-s 16 "${flags[@]}" \
  >"$out/bench.json" 2>"$out/bench.err" &
bench=$!
sleep 7 # start-up and warm-up
perf record -F 997 -a -g -o "$out/perf.data" -- sleep 10 2>/dev/null
wait "$bench"
# One name per kind of thread (peer-in-2 and peer-in-3 are both "peer-in").
perf script -i "$out/perf.data" 2>/dev/null | inferno-collapse-perf |
  sed -E 's/^(client-in|peer-in|peer-out|client-out|tagma-client)[^;]*/\1/' >"$out/folded"
inferno-flamegraph --minwidth 0.2 --width 1400 \
  --title "tagma bench ${flags[*]}: every thread of the machine (perf, 997 Hz)" \
  <"$out/folded" >"$out/flame.svg"
python3 "$root/scripts/profile_stages.py" "$out/folded" "$out/bench.json" | tee "$out/stages.md"
