#!/usr/bin/env bash
# Reads the AArch64 assembly the generator emits and checks that the inner loops of the score
# and P·V stages (part_out in the flash form the prefill default uses, weighted_sum with whole
# rows) are vector fused multiply-adds (fmla on .4s registers), so that a schedule that
# silently goes scalar fails.
#   arm_assembly_test.sh GENERATOR WORK_DIR
set -u
generator=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
failures=0 checks=0

# The lines of the basic block whose LLVM name starts with `for <stage>` (Halide names loop
# blocks after their loop variable: Halide 14 `for scores$1...`, Halide 21 `10_for_scores$1...`),
# up to the next block.
loop_body() { # loop_body FILE PATTERN
    awk -v pattern="$2" '
        $0 ~ /^(\.LBB|\/\/ %bb)/ {
            name = $0; gsub(/[0-9]+_for_/, "for ", name)
            inside = index(name, pattern) > 0 && name !~ /preheader/; next
        }
        inside { print }' "$1"
}

check_layer() { # check_layer NAME TARGET PARAMS...
    local name=$1 target=$2
    shift 2
    # P·V's loop over keys: r_keys, or r_values where a mask bounds it per register block.
    local pv_stage='for part_out$1.s1.r_'
    [[ " $* " == *" schedule_params=flash_chunk:0 "* ]] && pv_stage='for weighted_sum$1.s1.r_'
    if ! "$generator" -g attention -f "$name" -e assembly -o "$work" \
        "target=$target-no_runtime" "$@" > "$work/$name.log" 2>&1; then
        echo "FAILED: generating $name for $target"; cat "$work/$name.log"
        failures=$((failures + 1)); return
    fi
    for stage in 'for scores$1.s1.r_head_dim' "$pv_stage"; do
        checks=$((checks + 1))
        local body vector scalar
        body=$(loop_body "$work/$name.s" "$stage")
        vector=$(grep -cE 'fmla[[:space:]]+v[0-9]+\.4s' <<< "$body")
        scalar=$(grep -cE 'fmadd[[:space:]]+s[0-9]+|fmul[[:space:]]+s[0-9]+' <<< "$body")
        echo "$name ($target) '$stage': $vector vector fmla, $scalar scalar multiply-adds"
        if [ "$vector" -lt 4 ] || [ "$scalar" -ne 0 ]; then
            failures=$((failures + 1))
            echo "FAILED: $name: the $stage loop is not vector FMA"
        fi
    done
}

check_layer plain_d64 arm-64-linux heads=2 head_dim=64
check_layer causal_gqa_d32 arm-64-linux-arm_fp16 heads=4 kv_heads=2 head_dim=32 mask=causal
check_layer f16_d128 arm-64-linux-arm_fp16 heads=2 head_dim=128 dtype=f16 mask=padding
check_layer mha arm-64-linux model_dim=64 heads=4 projections=q,k,v,out bias=true
check_layer whole_rows_d64 arm-64-linux heads=2 head_dim=64 schedule_params=flash_chunk:0

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
