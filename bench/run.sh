#!/usr/bin/env bash
# Runs the benchmark with its fused peers: sets them up on first use (bench/peers/setup.sh, in
# bench/.peers), then runs BUILD/bench/bench_attention with the given options.
#     bench/run.sh [--build DIR] [bench_attention options...]     (DIR defaults to ./build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=build
if [ "${1:-}" = "--build" ]; then
    build=$2
    shift 2
fi
if [ ! -x "$build/bench/bench_attention" ]; then
    echo "bench/run.sh: $build/bench/bench_attention is not built (cmake --build $build)" >&2
    exit 1
fi
"$here/peers/setup.sh" "$here/.peers" >&2
exec "$build/bench/bench_attention" --peers "$here/.peers" "$@"
