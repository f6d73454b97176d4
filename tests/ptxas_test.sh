#!/bin/bash
# Compiles CUDA layers (tests/layers/gpu_kernels.attn) with `attngen compile --target cuda`,
# for the prefill and the decode shape class,
# extracts the PTX embedded in the library and assembles it with ptxas for sm_80 and sm_90.
# Each module is assembled for the GPU its .target names (sm_80 or sm_86) and for sm_90. Fails
# on an assembly error, on a missing sm_80 or sm_86 module, on any spill or local-memory stack
# frame, or on a kernel above the limits below; prints the resource report. Halide sizes shared
# memory at launch (dynamic shared memory), so ptxas reports only the static part; attngen
# refuses GPU tiles whose shared memory exceeds 48 KiB (gpu_shared_memory_bytes, checked by
# cli_test.sh).
# It also reads the PTX itself: in the prefill kernels of head_dim 64 and 128 (the layers in
# $fma_layers), every basic block with 16 or more float multiply-adds (the score and P·V loops of
# the online form) must do at least 4 of them per shared-memory load, and the prefill modules
# must load shared memory 128 bits at a time somewhere (ld.shared.v4).
# Skips (exit 77) without ptxas, except under CI=true, where it must be there.
#   usage: ptxas_test.sh ATTNGEN EXTRACT_PTX SOURCE_DIR WORK_DIR
set -euo pipefail
attngen=$1 extract=$2 source=$3 work=$4
ptxas=${PTXAS:-/usr/local/cuda/bin/ptxas}
# Per kernel: a one-warp block of the online form keeps its running state in registers, up to
# the hardware's 255 per thread (attngen's runtime lifts Halide's JIT cap of 64 to 255, see
# runtime/gpu.cpp); what must not happen is a spill or a local-memory stack frame. 48 KiB is
# the static shared memory a block may use without opting in.
max_registers=255
fma_layers=gqa_causal_d64,plain_d128,gqa_f16_d128
max_shared=49152 # static shared memory

if [ ! -x "$ptxas" ]; then
    if [ "${CI:-}" = true ]; then
        echo "FAIL: no ptxas at $ptxas (the CUDA toolkit); CI must check the PTX"
        exit 1
    fi
    echo "SKIP: no ptxas at $ptxas; set PTXAS to check the generated PTX"
    exit 77
fi

rm -rf "$work" && mkdir -p "$work"
# Both shape classes: prefill (whole rows per block) and decode (the split-KV form).
: >"$work/modules.txt"
for shape_class in prefill decode; do
    out="$work/$shape_class"
    mkdir -p "$out"
    "$attngen" compile "$source/tests/layers/gpu_kernels.attn" --target cuda \
        --shape-class "$shape_class" -o "$out" >"$out/compile.txt" 2>&1 ||
        { cat "$out/compile.txt"; exit 1; }
    # Halide warns when a schedule makes a region check that can never pass: such a kernel
    # compiles but fails at every call.
    if grep -A1 "guaranteed to fail" "$out/compile.txt"; then
        echo "FAIL: a CUDA $shape_class layer fails a bounds assertion at every call (above)"
        exit 1
    fi
    "$extract" "$out/libgpu_kernels.a" "$out/module" >>"$work/modules.txt"
done
# The head_dim 64 and 128 prefill layers alone, for the multiply-adds per load: their device
# objects (LAYER_halide-<target>.o, one per compute capability), taken out of the prefill library.
mkdir -p "$work/fma"
: >"$work/fma_modules.txt"
for layer in ${fma_layers//,/ }; do
    members=$(ar t "$work/prefill/libgpu_kernels.a" | grep "^${layer}_halide-.*cuda.*\.o$" || true)
    if [ -z "$members" ]; then
        echo "FAIL: no CUDA object of layer $layer in the prefill library"
        exit 1
    fi
    for member in $members; do
        (cd "$work/fma" && ar x "../prefill/libgpu_kernels.a" "$member")
        "$extract" "$work/fma/$member" "$work/fma/${member%.o}" >>"$work/fma_modules.txt"
    done
done
echo "$(wc -l <"$work/modules.txt") PTX modules in the prefill and decode libgpu_kernels.a"
# `--target cuda` means PTX for compute capability 8.0 and 8.6: both must be there.
for arch in sm_80 sm_86; do
    found=0
    while read -r module; do
        if grep -q "^\.target $arch" "$module"; then found=1; fi
    done <"$work/modules.txt"
    if [ $found = 0 ]; then
        echo "FAIL: no PTX module for $arch in the libraries"
        exit 1
    fi
done

failed=0
# FMAs per shared-memory load, per basic block of each module's PTX (a block starts at a label
# or at LLVM's "// %bb.N:" comment where one falls through into the next).
while read -r module; do
    if ! awk -v module="$(basename "$module")" '
        function flush() {
            if (fma >= 16) {
                blocks++
                if (loads > 0 && fma < 4 * loads) {
                    printf "FAIL: %s block %s: %d FMAs for %d shared loads (< 4 per load)\n",
                           module, label, fma, loads
                    bad = 1
                }
            }
            fma = 0; loads = 0
        }
        /^[$A-Za-z_][$A-Za-z_0-9]*:/ || /^\/\/ %bb\./ { flush(); label = $1 == "//" ? $2 : $1; next }
        /fma\.rn\.f32/ { fma++ }
        /ld\.shared/ { loads++; if (/ld\.shared\.v4/) vectors++ }
        END {
            flush()
            printf "%s: %d blocks of 16+ FMAs, all at 4+ per shared load%s; %d 128-bit shared loads\n",
                   module, blocks, bad ? " but one" : "", vectors
            exit bad
        }' "$module"; then
        failed=1
    fi
done <"$work/fma_modules.txt"
if ! grep -q "ld\.shared\.v4" "$work"/prefill/module_*.ptx; then
    echo "FAIL: no 128-bit shared loads (ld.shared.v4) in the prefill kernels"
    failed=1
fi

while read -r module; do
    own=$(sed -nE 's/^\.target (sm_[0-9]+).*/\1/p' "$module" | head -1)
    for arch in $own sm_90; do
        report="$module.$arch.txt"
        if ! "$ptxas" -arch="$arch" -v -o /dev/null "$module" >"$report" 2>&1; then
            echo "FAIL: ptxas -arch=$arch $(basename "$module"):"
            cat "$report"
            failed=1
            continue
        fi
        # One "Compiling entry function" block per kernel: registers, shared memory, spills.
        while read -r line; do
            case "$line" in
            *"Compiling entry function"*) kernel=$(sed -E "s/[^']*'([^']+)'.*/\1/" <<<"$line") ;;
            *"bytes spill stores"*)
                # A stack frame is an array the kernel keeps in local memory, not registers.
                stack=$(sed -E 's/^ *([0-9]+) bytes stack frame.*/\1/' <<<"$line")
                if [ "$stack" != 0 ]; then
                    echo "FAIL: $arch $kernel keeps $stack bytes in a local-memory stack frame"
                    failed=1
                fi
                stores=$(sed -E 's/.* ([0-9]+) bytes spill stores.*/\1/' <<<"$line")
                loads=$(sed -E 's/.* ([0-9]+) bytes spill loads.*/\1/' <<<"$line")
                if [ "$stores" != 0 ] || [ "$loads" != 0 ]; then
                    echo "FAIL: $arch $kernel spills ($stores bytes stored, $loads loaded)"
                    failed=1
                fi
                ;;
            *"Used "*" registers"*)
                registers=$(sed -E 's/.*Used ([0-9]+) registers.*/\1/' <<<"$line")
                shared=0
                if grep -q "bytes smem" <<<"$line"; then
                    shared=$(sed -E 's/.* ([0-9]+) bytes smem.*/\1/' <<<"$line")
                fi
                printf '%-6s %-60s %4s registers %6s bytes static smem\n' "$arch" "$kernel" \
                    "$registers" "$shared"
                if [ "$registers" -gt $max_registers ] || [ "$shared" -gt $max_shared ]; then
                    echo "FAIL: $arch $kernel is above $max_registers registers or $max_shared bytes"
                    failed=1
                fi
                ;;
            esac
        done <"$report"
    done
done <"$work/modules.txt"
exit $failed
