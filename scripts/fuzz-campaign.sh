#!/usr/bin/env bash
# A fuzzing campaign: every cargo-fuzz target (or the ones named) for SECONDS each; prints
# executions and coverage per target and exits 1 if any target crashed or an input ran past
# 20 s (a hang); the input is kept under fuzz/artifacts/TARGET/: turn it into a regression
# test.
#
# Usage: scripts/fuzz-campaign.sh SECONDS [TARGET...]
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -uo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH=${1:?usage: scripts/fuzz-campaign.sh SECONDS [TARGET...]}
shift
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "error: the nightly toolchain is missing — fix: rustup toolchain install nightly" >&2
  exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "error: cargo-fuzz is missing — fix: cargo install cargo-fuzz" >&2
  exit 2
fi
if [[ $# -gt 0 ]]; then
  TARGETS=("$@")
else
  mapfile -t TARGETS < <(cargo +nightly fuzz list)
fi
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
# Build all first, so the time per target is spent fuzzing.
echo "building the fuzz targets (nightly, sanitizers)…" >&2
cargo +nightly fuzz build 2>"$LOGS/build.log" || { cat "$LOGS/build.log" >&2; exit 2; }
crashed=0
printf '%-18s %12s %10s %8s %s\n' target executions exec/s cov result
for t in "${TARGETS[@]}"; do
  mkdir -p "corpus/$t"
  if cargo +nightly fuzz run "$t" -- -max_total_time="$SECONDS_EACH" -timeout=20 -print_final_stats=1 \
      >"$LOGS/$t.log" 2>&1; then
    result=ok
  else
    result=CRASHED
    crashed=1
  fi
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$LOGS/$t.log" | grep -oE '[0-9]+$' | tail -1)
  speed=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$LOGS/$t.log" | grep -oE '[0-9]+$' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$LOGS/$t.log" | tail -1 | grep -oE '[0-9]+')
  printf '%-18s %12s %10s %8s %s\n' "$t" "${runs:-?}" "${speed:-?}" "${cov:-?}" "$result"
  if [[ $result == CRASHED ]]; then
    grep -E 'panicked at|ERROR: libFuzzer|Test unit written to' "$LOGS/$t.log" | head -5 | sed 's/^/    /'
  fi
done
exit $crashed
