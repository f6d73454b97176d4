#!/usr/bin/env bash
# The GPU check and benchmark, in one script: builds the GPU tests and the GPU benchmark for CUDA,
# runs the numerical suite on the GPU (it fails rather than skips without one), then prints the
# benchmark tables: attngen against PyTorch's scaled_dot_product_attention (math and
# memory-efficient backends in float32, flash in float16 as context), prefill B=1..8, H=16, D 64
# and 128, L 512..8192, no mask and causal, with TFLOP/s and the fraction of the GPU's float32
# peak; decode (Lq=1, 32 heads on 8 kv heads, D 128) with GB/s against the memory bandwidth.
#
#   bench/gpu/run.sh [all|build|run] [BUILD_DIR]     (default: all build-gpu)
#
# build needs the project's dependencies (.ci/install-deps: Halide, the CUDA toolkit is not
# needed); run needs an NVIDIA GPU and its driver, and python3 with torch for the peer columns.
# Where the GPU machine cannot build (no Halide there), build here, copy BUILD_DIR/tests/
# attngen_gpu_tests and BUILD_DIR/bench/gpu/bench_gpu over at the same paths, and run there.
# Environment: BATCHES (1,2,4,8), LENGTHS (512,1024,2048,4096,8192), DECODE_BATCHES (1,4,8),
# DECODE_LENGTHS (1024,4096,16384,32768), RUNS (5).
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-all}
build=${2:-build-gpu}
batches=${BATCHES:-1,2,4,8}
lengths=${LENGTHS:-512,1024,2048,4096,8192}
decode_batches=${DECODE_BATCHES:-1,4,8}
decode_lengths=${DECODE_LENGTHS:-1024,4096,16384,32768}
runs=${RUNS:-5}

case "$mode" in all | build | run) ;; *)
    echo "usage: bench/gpu/run.sh [all|build|run] [BUILD_DIR]" >&2
    exit 1
    ;;
esac

if [ "$mode" != run ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNGEN_GPU_TEST_API=cuda \
        -DATTNGEN_BUILD_BENCH=OFF -DATTNGEN_BUILD_EXAMPLES=OFF
    cmake --build "$build" --target attngen_gpu_tests bench_gpu
fi
[ "$mode" = build ] && exit 0

echo "== the numerical suite on the GPU"
ATTNGEN_REQUIRE_GPU=1 "$build/tests/attngen_gpu_tests"

echo "== PyTorch SDPA on the same grid"
peer=()
if python3 -c "import torch" 2>/dev/null; then
    python3 bench/gpu/sdpa_peer.py "$build/sdpa.txt" --batches "$batches" --lengths "$lengths" \
        --decode-batches "$decode_batches" --decode-lengths "$decode_lengths" --runs "$runs" &&
        peer=(--peer "$build/sdpa.txt")
else
    echo "no python3 with torch: the table has no peer columns"
fi

echo "== attngen"
"$build/bench/gpu/bench_gpu" --batches "$batches" --lengths "$lengths" \
    --decode-batches "$decode_batches" --decode-lengths "$decode_lengths" --runs "$runs" "${peer[@]}"
