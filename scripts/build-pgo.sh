#!/usr/bin/env bash
# Builds `tagma` with profile-guided optimisation (LLVM PGO): an instrumented build runs a
# training set of workloads, the counts it wrote are merged, and the release build is
# compiled again with them, so that the compiler lays out hot paths, inlines and predicts
# branches by what the program does rather than by guesses. The simulator's hot loops are
# branchy code waiting on memory; on this project's 2-core machine the optimised binary runs
# `tagma crdt sim --nodes 1024 --publishers-pct 100 --protocol vcube` in about 0.91 of the
# plain release build's time (median of eight alternating pairs), with an identical report.
#
#   scripts/build-pgo.sh [OUT]          # OUT: where the binary goes (default target/pgo/tagma)
#   scripts/build-pgo.sh --check TAGMA  # runs the training set with TAGMA, without building
#                                       # (CI does, so that the set keeps up with the CLI)
#
# The training set is smaller runs of the simulators (VCube-Sync, Plumtree and flooding,
# with and without crashes and loss, and the replication simulator) and a short local
# cluster (`tagma demo`), not the measured runs themselves. Needs `llvm-profdata` of the
# compiler's LLVM (`rustup component add llvm-tools`, done here when rustup is present).
# Takes two release builds (about 5 minutes each on 2 cores) and a minute of training.
set -euo pipefail

# The training set: every command must exit 0.
train() { # tagma binary
  local tagma=$1
  run() {
    echo "   tagma $*"
    "$tagma" "$@" >/dev/null
  }
  run crdt sim --nodes 256 --publishers-pct 100 --protocol vcube --duration-s 5 --drain-s 2
  run crdt sim --nodes 200 --publishers 20 --topics 4 --crash-pct 10 --loss-pct 5 \
    --duration-s 6 --drain-s 20
  run crdt sim --nodes 256 --publishers-pct 25 --protocol plumtree --duration-s 5 --drain-s 2
  run crdt sim --nodes 256 --publishers-pct 25 --protocol flood --duration-s 3 --drain-s 2
  run sim --seed 1
  run demo --duration-s 3 --clients 4
}

if [[ ${1:-} == --check ]]; then
  train "${2:?usage: build-pgo.sh --check TAGMA}"
  exit 0
fi
# OUT as the caller named it, before moving to the repository's root.
out=$(realpath -m "${1:-$(dirname "$0")/../target/pgo/tagma}")
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [[ ! -x $profdata ]]; then
  if command -v rustup >/dev/null 2>&1; then
    rustup component add llvm-tools
  fi
  if [[ ! -x $profdata ]]; then
    echo "error: $profdata not found; install it with: rustup component add llvm-tools" >&2
    exit 1
  fi
fi

work=target/pgo-work
rm -rf "$work/profiles"
mkdir -p "$work/profiles" "$(dirname "$out")"
profiles=$(cd "$work/profiles" && pwd)

# `--target` keeps build scripts and procedural macros out of the instrumentation (the
# flags then apply to the target's artifacts only).
build() { # target-dir rustflags
  RUSTFLAGS="$2" CARGO_TARGET_DIR="$1" \
    cargo build --release --locked -p tagma-cli --target "$host"
}

echo "== 1/3: instrumented build"
build "$work/gen" "-Cprofile-generate=$profiles"
trainee="$work/gen/$host/release/tagma"

echo "== 2/3: training runs"
export LLVM_PROFILE_FILE="$profiles/%p-%m.profraw"
train "$trainee"
unset LLVM_PROFILE_FILE
"$profdata" merge -o "$work/merged.profdata" "$profiles"/*.profraw

echo "== 3/3: optimised build"
build "$work/use" "-Cprofile-use=$(pwd)/$work/merged.profdata"
cp "$work/use/$host/release/tagma" "$out"
echo "built $out"
