#!/usr/bin/env bash
# The attngen command-line tool as a user drives it: exit codes 0/1/2, --help for each command,
# check, compile's three outputs, targets, run, tune, and every layer of every spec.
#   cli_test.sh ATTNGEN SOURCE_DIR WORK_DIR [PART]
# PART is one of basics, tune, targets, layers (default: all of them, in that order); ctest runs
# the parts as four tests, side by side, each in its own WORK_DIR.
set -u
attngen=$1 source=$2 work=$3 part=${4:-all}
case $part in
    all | basics | tune | targets | layers) ;;
    *)
        echo "cli_test.sh: PART must be all, basics, tune, targets or layers, got '$part'" >&2
        exit 2
        ;;
esac
failures=0 checks=0
# The Halide attngen was built with (`attngen --version`: "attngen 0.1.0 (Halide 21.0.0)").
halide_major=$("$attngen" --version | sed -n 's/.*(Halide \([0-9]*\)\..*/\1/p')

expect() { # expect STATUS DESCRIPTION COMMAND...
    local want=$1 what=$2
    shift 2
    "$@" > "$work/out.txt" 2> "$work/err.txt"
    local got=$?
    checks=$((checks + 1))
    if [ "$got" -ne "$want" ]; then
        failures=$((failures + 1))
        echo "FAILED: $what: exit $got, expected $want"
        sed 's/^/  stdout: /' "$work/out.txt" | head -20
        sed 's/^/  stderr: /' "$work/err.txt" | head -20
    fi
}
contains() { # contains FILE TEXT DESCRIPTION
    checks=$((checks + 1))
    if ! grep -qF -- "$2" "$1"; then
        failures=$((failures + 1))
        echo "FAILED: $3: '$2' not in $1"
        sed 's/^/  /' "$1" | head -20
    fi
}

# checked_out LOG DESCRIPTION: two new trials, and none of the log's trials failed its check
# (compile error, wrong result, crash, time-out). A too_slow trial passed its check and was
# stopped after a slow warm-up: on a loaded 2-core CI machine that is timing noise.
checked_out() {
    contains "$work/out.txt" "2 trials (0 resumed, 2 new)" "$2: both trials ran"
    checks=$((checks + 1))
    if grep -vE '"status":"(ok|too_slow)"' "$1" | grep -q .; then
        failures=$((failures + 1))
        echo "FAILED: $2: a trial failed its check"
        grep -vE '"status":"(ok|too_slow)"' "$1" | head -5
    fi
}

rm -rf "$work" && mkdir -p "$work"
spec=$source/tests/layers/modifications.attn
# The tiny search space and tune command of the tune part; the targets part reuses them.
space='query_vectors=2/3;key_block=4;value_queries=6;d_vectors=2'
log=$work/tune.jsonl
tune=("$attngen" tune "$spec" --layer alibi --shapes '1,40;1,3,70' --trials 2 --runs 5
      --space "$space" --log "$log" --plot "$work/tune.svg")

# basics: --help and --version, check, compile's outputs, targets, run and its errors, params.
part_basics() {
    commands="check compile targets run tune header"
    for command in $commands; do
        expect 0 "attngen $command --help" "$attngen" "$command" --help
        contains "$work/out.txt" "usage: attngen $command" "attngen $command --help prints its usage"
    done
    expect 0 "attngen --help" "$attngen" --help
    for command in $commands; do
        checks=$((checks + 1))
        listed=$(grep -c "^  $command " "$work/out.txt")
        if [ "$listed" != 1 ]; then
            failures=$((failures + 1))
            echo "FAILED: attngen --help lists '$command' $listed times, expected once"
        fi
    done
    expect 0 "attngen --version" "$attngen" --version
    checks=$((checks + 1))
    if ! grep -qE '^attngen [0-9]+\.[0-9]+\.[0-9]+ \(Halide [0-9]+\.[0-9]+\.[0-9]+\)$' "$work/out.txt"; then
        failures=$((failures + 1))
        echo "FAILED: attngen --version prints 'attngen X.Y.Z (Halide X.Y.Z)', got: $(cat "$work/out.txt")"
    fi
    version=$(sed -E 's/^attngen ([^ ]+) .*/\1/' "$work/out.txt")
    expect 1 "no command" "$attngen"
    expect 1 "an unknown command" "$attngen" frobnicate
    expect 1 "an unknown option" "$attngen" compile "$spec" --colour red -o "$work/x"

    expect 0 "check a valid spec" "$attngen" check "$spec"
    contains "$work/out.txt" "8 layers" "check counts the layers"
    printf 'attention broken {\n  heads = 8\n  kv_heads = 3\n  head_dim = 64\n' > "$work/broken.attn"
    expect 1 "check a broken spec" "$attngen" check "$work/broken.attn"
    contains "$work/err.txt" "broken.attn:" "check prints file:line:column"
    expect 1 "check a missing file" "$attngen" check "$work/missing.attn"

    expect 0 "targets" "$attngen" targets
    contains "$work/out.txt" "x86-64-linux-avx2-fma-f16c" "targets lists the x86 variants"

    expect 0 "compile two layers" "$attngen" compile "$spec" --target x86-64-linux \
        --layers alibi,prefix_lm --name mods -o "$work/lib"
    for file in libmods.a mods.h mods.manifest.json; do
        checks=$((checks + 1))
        [ -s "$work/lib/$file" ] || { failures=$((failures + 1)); echo "FAILED: compile wrote no $file"; }
    done
    contains "$work/lib/mods.h" "inline attngen::Status alibi(const attngen::Arguments &args)" \
        "the header has a typed entry point per layer"
    contains "$work/lib/mods.h" "inline attngen::Status prefix_lm(" "the second layer's entry point"
    contains "$work/lib/mods.h" "#define ATTNGEN_GENERATED_BY \"$version\"" \
        "the header names the attngen version that generated it"
    contains "$work/lib/mods.manifest.json" '"name": "slope", "kind": "input", "dtype": "f32", "shape": [4]' \
        "the manifest lists a declared tensor with its shape"
    contains "$work/lib/mods.manifest.json" '"name": "query", "kind": "input", "dtype": "f32", "shape": ["batch", 4, "queries", 32]' \
        "the manifest lists the per-head inputs with their shapes"
    expect 1 "compile an unknown layer" "$attngen" compile "$spec" --target x86-64-linux \
        --layers nope -o "$work/lib2"
    expect 1 "compile for an unknown target" "$attngen" compile "$spec" --target vax -o "$work/lib3"
    expect 1 "compile without -o" "$attngen" compile "$spec" --target x86-64-linux
    expect 1 "compile naming a layer twice" "$attngen" compile "$spec" --target x86-64-linux \
        --layers alibi,alibi -o "$work/lib4"
    contains "$work/err.txt" "--layers names 'alibi' more than once" "compile names the repeated layer"
    expect 0 "compile with schedule parameters written key=value, as --help shows them" "$attngen" \
        compile "$spec" --target x86-64-linux-avx2 --layers alibi \
        --schedule-params flash_chunk=0,query_vectors=2 -o "$work/lib_params"

    expect 0 "run softcap" "$attngen" run "$spec" --layer softcap --shape 2,19,23 --scalar cap=0.8 --runs 2
    contains "$work/out.txt" ": ok" "run checks against the reference"
    llama=$source/tests/specs/llama.attn
    expect 0 "run rotary embeddings after projections" "$attngen" run "$llama" --layer llama_gqa \
        --shape 2,37 --runs 1
    contains "$work/out.txt" ": ok" "run checks rotary embeddings against the reference"
    expect 0 "run partial interleaved rotary embeddings, split-KV" "$attngen" run "$llama" \
        --layer gptj_partial --shape 1,3,300 --runs 1 --schedule-params split_chunk=64
    contains "$work/out.txt" ": ok" "run checks the split-KV rotary layer against the reference"
    expect 0 "run a layer that writes its lse, split-KV" "$attngen" run "$llama" \
        --layer cascade_part --shape 2,3,200 --runs 1
    contains "$work/out.txt" "max |lse - reference| / max(|reference|, 1) =" "run checks the lse"
    expect 0 "run documents" "$attngen" run "$spec" --layer documents --shape 1,33 --runs 1
    expect 1 "run with a scalar the layer lacks" "$attngen" run "$spec" --layer alibi --shape 1,4 \
        --scalar cap=2
    expect 1 "run with a bad shape" "$attngen" run "$spec" --layer alibi --shape 1,0
    expect 0 "run the whole-row form" "$attngen" run "$spec" --layer alibi --shape 1,40 --runs 1 \
        --schedule-params flash_chunk=0
    contains "$work/out.txt" ": ok" "the whole-row form matches the reference"
    expect 0 "run the split-KV form on a prefill shape" "$attngen" run "$spec" --layer alibi \
        --shape 1,40 --runs 1 --schedule-params split_chunk=16
    contains "$work/out.txt" ": ok" "naming split_chunk turns the prefill default flash_chunk off"
    expect 0 "run with the parameters' old names, as older logs and scripts write them" "$attngen" \
        run "$spec" --layer alibi --shape 1,40 --runs 1 \
        --schedule-params kv_chunk=16,query_block=2,copy_values=0
    contains "$work/out.txt" ": ok" "old names and numeric flags are still read"
    expect 1 "run with a flag that is not true or false" "$attngen" run "$spec" --layer alibi \
        --shape 1,40 --schedule-params packed_weights=yes
    contains "$work/err.txt" "schedule parameter packed_weights must be true|false, got 'yes'" \
        "a flag's values are named"
    expect 1 "run with an unknown copy_values" "$attngen" run "$spec" --layer alibi \
        --shape 1,40 --schedule-params copy_values=some
    contains "$work/err.txt" "schedule parameter copy_values must be none|flash|all, got 'some'" \
        "an enum's values are named"
    expect 1 "run with a GPU parameter on a CPU target" "$attngen" run "$spec" --layer alibi \
        --shape 1,40 --schedule-params step_keys=16
    contains "$work/err.txt" "unknown CPU schedule parameter 'step_keys=16'" \
        "a parameter of the other family is refused"
    expect 0 "params lists every schedule parameter" "$attngen" params
    contains "$work/out.txt" "value_queries=1..16" "params shows a CPU parameter and its values"
    contains "$work/out.txt" "step_keys=1..128" "params shows a GPU parameter and its values"
    expect 0 "params --markdown writes the reference page" "$attngen" params --markdown
    checks=$((checks + 1))
    if ! cmp -s "$work/out.txt" "$source/docs/schedule-params.md"; then
        failures=$((failures + 1))
        echo "FAILED: docs/schedule-params.md is not what 'attngen params --markdown' prints;" \
            "regenerate it: attngen params --markdown > docs/schedule-params.md"
    fi
    expect 1 "run with both chunk forms" "$attngen" run "$spec" --layer alibi --shape 1,40 \
        --schedule-params split_chunk=16,flash_chunk=32
    contains "$work/err.txt" "at most one may be nonzero, got split_chunk=16 and flash_chunk=32" \
        "both chunk forms at once are refused, naming both values"
    expect 1 "run the split-KV form with rows_up_to" "$attngen" run "$spec" --layer alibi \
        --shape 1,40 --schedule-params split_chunk=16,rows_up_to=32
    contains "$work/err.txt" "the split-KV form takes none, got rows_up_to=32 with split_chunk=16" \
        "rows_up_to with the split-KV form is refused, naming both values"
    expect 0 "run projections with other GEMM tiles" "$attngen" run "$spec" --layer mha_alibi \
        --shape 2,23 --runs 1 --schedule-params gemm_row_vectors=1,gemm_outputs=2,gemm_task_tiles=5
    contains "$work/out.txt" ": ok" "projection GEMM tiles given on the command line match the reference"
    expect 0 "run packed projections with other GEMM tiles" "$attngen" run "$spec" --layer mha_alibi \
        --shape 2,23 --runs 1 --schedule-params packed_weights=1,gemm_rows=3,gemm_task_rows=10
    contains "$work/out.txt" ": ok" \
        "packed projection GEMM tiles given on the command line match the reference"
    expect 1 "run with the removed fused_qkv" "$attngen" run "$spec" --layer mha_alibi \
        --shape 2,23 --runs 1 --schedule-params fused_qkv=true
    contains "$work/err.txt" "schedule parameter fused_qkv was removed" \
        "a removed schedule parameter is refused by name"
    expect 1 "run with the removed alternate_chunks" "$attngen" run "$spec" --layer alibi \
        --shape 1,40 --runs 1 --schedule-params alternate_chunks=true
    contains "$work/err.txt" "schedule parameter alternate_chunks was removed" \
        "the other removed schedule parameter is refused by name"
    expect 1 "run with packed_weights=2" "$attngen" run "$spec" --layer mha_alibi --shape 1,4 \
        --schedule-params packed_weights=2
    contains "$work/err.txt" "schedule parameter packed_weights must be true|false, got '2'" \
        "a flag out of range is refused, naming the value"
    expect 1 "run with a zero GEMM tile" "$attngen" run "$spec" --layer mha_alibi --shape 1,4 \
        --schedule-params gemm_rows=0
    contains "$work/err.txt" "schedule parameter gemm_rows must be in 1..16, got '0'" \
        "a GEMM tile out of range is refused, naming the value"
    expect 1 "run an unknown layer" "$attngen" run "$spec" --layer nope --shape 1,4
    expect 1 "run at a shape whose tensors exceed 2 GiB" "$attngen" run "$spec" --layer alibi \
        --shape 4096,1048576
    contains "$work/err.txt" "a tensor holds at most 2^31 - 1 bytes" "run names the tensor too large"
    expect 1 "run with an f32 scalar no float holds" "$attngen" run "$spec" --layer softcap \
        --shape 1,4 --scalar cap=1e39
    contains "$work/err.txt" "cap is an f32 scalar" "run names the scalar out of range"
    printf 'attention counted {\n  heads = 2; head_dim = 16\n  scalar n: i32\n  mask = (k < n)\n}\n' \
        > "$work/counted.attn"
    expect 1 "run with a fractional i32 scalar" "$attngen" run "$work/counted.attn" \
        --layer counted --shape 1,4 --scalar n=2.5
    contains "$work/err.txt" "n is an i32 scalar" "run names the i32 scalar"
    expect 0 "run with an integral i32 scalar" "$attngen" run "$work/counted.attn" \
        --layer counted --shape 1,4 --scalar n=3 --runs 1
    printf 'attention int { heads = 2; head_dim = 16 }\n' > "$work/keyword.attn"
    expect 1 "check a layer named by a C++ keyword" "$attngen" check "$work/keyword.attn"
    contains "$work/err.txt" "a C or C++ keyword" "check says why the name is refused"
    printf 'attention big {\n  heads = 2; head_dim = 16\n  tensor t[65536, 65536, 65536]\n  score_mod = score + t[0, 0, k]\n}\n' \
        > "$work/big.attn"
    expect 1 "check a tensor over 2 GiB" "$attngen" check "$work/big.attn"
    contains "$work/err.txt" "a tensor holds at most 2^31 - 1 bytes" "check names the tensor too large"
}

# tune: a real search on a tiny space, its log, resume, a damaged line, export, merge, and
# generation from the exported table.
part_tune() {
    expect 0 "tune a tiny space, with one autoscheduler" "${tune[@]}" --baselines Mullapudi2016
    contains "$work/out.txt" "2 trials (0 resumed, 2 new)" "tune runs the trials asked for"
    contains "$work/out.txt" "winner after re-measurement" "tune names a winner"
    contains "$work/out.txt" "Mullapudi2016" "tune measures the autoscheduler baseline"
    contains "$work/tune.svg" "<polyline" "tune plots best time against trials"
    # Per shape: 2 trials, 1 baseline, and the trials that ran ok (the finalists) re-measured in 2
    # rounds. A trial whose warm-up is far slower than the best so far stops as too_slow, which a
    # 0.03 ms call on a shared machine sometimes is.
    ok_trials=$(grep '"phase":"search"' "$log" | grep '"scheduler":"attngen"' | grep -c '"status":"ok"')
    expected_lines=$((2 * 3 + 2 * ok_trials))
    checks=$((checks + 1))
    [ "$ok_trials" -ge 2 ] && [ "$(wc -l < "$log")" -eq "$expected_lines" ] || {
        failures=$((failures + 1))
        echo "FAILED: log has $(wc -l < "$log") lines with $ok_trials trials ok," \
            "expected $expected_lines and at least 2 trials ok"
    }
    echo '{"spec_hash": "truncated' >> "$log"
    expect 0 "tune resumes from its log" "${tune[@]}" --baselines Mullapudi2016
    contains "$work/out.txt" "2 trials (2 resumed, 0 new)" "a resumed search repeats no trial"
    contains "$work/err.txt" "tune.jsonl:$((expected_lines + 1)): not valid JSON" \
        "a damaged log line is reported"
    expect 0 "tune export" "$attngen" tune export "$log" -o "$work/tuned"
    contains "$work/out.txt" "prefill" "export writes the prefill class"
    contains "$work/out.txt" "decode" "export writes the decode class"
    expect 0 "compile with the tuned table" "$attngen" compile "$spec" --target host \
        --layers alibi,prefix_lm --tuned "$work/tuned" -o "$work/lib_tuned"
    contains "$work/out.txt" "layer alibi, " "generation says which variant is tuned"
    checks=$((checks + 1))
    if grep -q "no tuned record for" "$work/out.txt"; then
        failures=$((failures + 1))
        echo "FAILED: generation is quiet about the variants that use the defaults"
    fi
    expect 0 "compile with the tuned table, verbose" env ATTNGEN_VERBOSE=1 "$attngen" compile \
        "$spec" --target host --layers alibi,prefix_lm --tuned "$work/tuned" -o "$work/lib_tuned"
    contains "$work/out.txt" "from $work/tuned/" "verbose generation names the tuned table"
    contains "$work/out.txt" "no tuned record for" "verbose generation says when there is none"
    # A table exported before fused_qkv was removed: at 0 (what attngen does now) the key is
    # dropped and the record used; at 1 the record is skipped, with the reason.
    for value in 0 1; do
        mkdir -p "$work/tuned_old_$value"
        for table in "$work/tuned"/*.json; do
            sed "s/\"params\": {/\"params\": {\"fused_qkv\": $value, /" "$table" \
                > "$work/tuned_old_$value/$(basename "$table")"
        done
        expect 0 "compile with a table that sets fused_qkv=$value" env ATTNGEN_VERBOSE=1 \
            "$attngen" compile "$spec" --target host --layers alibi --tuned "$work/tuned_old_$value" \
            -o "$work/lib_tuned_old"
        contains "$work/tuned_old_$value/$(ls "$work/tuned" | head -1)" '"fused_qkv"' \
            "the old table names fused_qkv"
        if [ "$value" -eq 0 ]; then
            contains "$work/out.txt" "from $work/tuned_old_0/" "a record with fused_qkv=0 is used"
        fi
    done
    contains "$work/out.txt" "fused_qkv=1 was removed" "a record of a removed schedule is skipped"
    contains "$work/out.txt" "no tuned record for" "the skipped record is not used"
    expect 0 "tune merge" "$attngen" tune merge "$log" "$log" -o "$work/merged.jsonl"
    contains "$work/out.txt" "records from 2 logs" "merge joins logs without duplicates"
}

# targets: candidates tuned ahead of time for AArch64 and for the GPU schedule, the GPU
# schedule's limits, the tool's refusals, and a cached layer.
part_targets() {
    # Targets tuned ahead of time: AArch64 candidates linked with the harness by the cross
    # compiler and run under qemu-aarch64 (in a work folder whose name has a space and a quote,
    # which the commands must quote); the GPU schedule on OpenCL (PoCL), its own space.
    expect 0 "tune arm-64-linux under qemu" "$attngen" tune "$spec" --layer alibi --shapes 1,40 \
        --target arm-64-linux --trials 2 --runs 5 --space "$space" --log "$work/arm.jsonl" \
        --work "$work/arm work's" --plot "$work/arm.svg"
    contains "$work/out.txt" "runner 'qemu-aarch64" "AArch64 candidates run under qemu"
    checked_out "$work/arm.jsonl" "AArch64 candidates check out"
    if [ -e /etc/OpenCL/vendors/pocl.icd ]; then
        expect 0 "tune the GPU schedule on OpenCL" "$attngen" tune "$spec" --layer alibi \
            --shapes 1,40 --target x86-64-linux-opencl --trials 2 --runs 5 \
            --space 'query_tile=8/16;step_keys=16' --log "$work/cl.jsonl" --work "$work/cl-work" \
            --plot "$work/cl.svg" --baselines none
        checked_out "$work/cl.jsonl" "OpenCL candidates check out"
        contains "$work/out.txt" "query_tile=" "a GPU target searches the GPU space"
        expect 0 "a score_mod with a run-time scalar on the GPU schedule" "$attngen" tune "$spec" \
            --layer softcap --shapes 1,33 --target x86-64-linux-opencl --trials 2 --runs 5 \
            --scalar cap=0.75 --log "$work/cl-softcap.jsonl" --work "$work/cl-softcap-work" \
            --baselines none
        checked_out "$work/cl-softcap.jsonl" "the soft-capped GPU layer checks out"
        expect 0 "tune the GPU split-KV chunk on decode shapes" "$attngen" tune "$spec" \
            --layer alibi --shapes 1,2,70 --target x86-64-linux-opencl --trials 2 --runs 5 \
            --space 'query_tile=16;step_keys=16;split_chunk=64/128' --log "$work/cl-decode.jsonl" \
            --work "$work/cl-decode-work" --plot "$work/cl-decode.svg" --baselines none
        checked_out "$work/cl-decode.jsonl" "split-KV GPU candidates check out"
        contains "$work/out.txt" "split_chunk=" "decode shapes search the GPU split_chunk"
        if [ "$halide_major" -ge 21 ]; then
            expect 0 "Halide's GPU autoscheduler as a baseline on OpenCL" "$attngen" tune "$spec" \
                --layer alibi --shapes 1,40 --target x86-64-linux-opencl --trials 1 --runs 5 \
                --space 'query_tile=16;step_keys=16' --baselines Anderson2021 \
                --log "$work/cl-anderson.jsonl" --work "$work/cl-anderson-work"
            contains "$work/cl-anderson.jsonl" '"scheduler":"Anderson2021"' \
                "the GPU autoscheduler's baseline is logged"
            checks=$((checks + 1))
            grep '"scheduler":"Anderson2021"' "$work/cl-anderson.jsonl" | grep -q '"status":"ok"' || {
                failures=$((failures + 1))
                echo "FAILED: the Anderson2021 baseline did not check out"
                grep '"scheduler":"Anderson2021"' "$work/cl-anderson.jsonl" | head -3
            }
        fi
    fi
    if [ "$halide_major" -lt 21 ]; then
        expect 1 "Halide 14 has no GPU autoscheduler" "$attngen" tune "$spec" --layer alibi \
            --shapes 1,40 --target x86-64-linux-opencl --trials 1 --baselines Anderson2021
        contains "$work/err.txt" "Anderson2021, with Halide 21 (attngen was built with Halide 14" \
            "the refusal names the Halide it needs"
    fi
    expect 1 "a GPU step_keys that is not a power of two" "$attngen" compile "$spec" \
        --target x86-64-linux-opencl --layers alibi --schedule-params step_keys=24 -o "$work/lib_cl"
    contains "$work/err.txt" "step_keys must be a power of two for a GPU target, got 24" \
        "the GPU chunk rule is stated with the value given"
    expect 1 "GPU kv chunks that are not whole steps of keys" "$attngen" compile "$spec" \
        --target x86-64-linux-opencl --layers alibi --shape-class decode \
        --schedule-params split_chunk=40,step_keys=16 -o "$work/lib_cl"
    contains "$work/err.txt" "split_chunk must be a multiple of step_keys (16) for a GPU target, got 40" \
        "the GPU kv chunk rule is stated with the values given"
    expect 1 "GPU heads per block that do not divide the group" "$attngen" compile "$spec" \
        --target x86-64-linux-opencl --layers alibi --schedule-params heads_per_block=3 \
        -o "$work/lib_cl"
    contains "$work/err.txt" "heads_per_block must divide the 1 query heads per kv head, got 3" \
        "the GPU heads per block are held to the group"
    expect 1 "GPU tiles that need more shared memory than a block has" "$attngen" compile "$spec" \
        --target x86-64-linux-opencl --layers alibi --schedule-params query_tile=128,step_keys=128 \
        -o "$work/lib_cl"
    contains "$work/err.txt" \
        "query_tile=128, step_keys=128 and heads_per_block=1 need 181760 bytes of shared memory" \
        "GPU tiles are held to the shared memory of a block"
    expect 1 "a GPU state width that leaves no whole lanes per row" "$attngen" compile "$spec" \
        --target x86-64-linux-opencl --layers alibi --schedule-params d_per_lane=5 -o "$work/lib_cl"
    contains "$work/err.txt" \
        "d_per_lane must divide head_dim 32 into a power of two of at most 32 lanes per row, got 5" \
        "the GPU state width is held to whole lanes"
    expect 1 "a GPU query tile that splits the lanes of a row" "$attngen" compile "$spec" \
        --target x86-64-linux-opencl --layers alibi --schedule-params d_per_lane=8,query_tile=12 \
        -o "$work/lib_cl"
    contains "$work/err.txt" \
        "query_tile must be a power of two or a multiple of 8 (32 lanes over 4 lanes per row), got 12" \
        "the GPU query tile is held to whole stripes of lanes"
    printf 'attention small_head {\n  heads = 4\n  kv_heads = 2\n  head_dim = 16\n}\n' \
        >"$work/small_head.attn"
    expect 1 "GPU heads sharing a block whose tile fills half a warp" "$attngen" compile \
        "$work/small_head.attn" --target x86-64-linux-opencl --shape-class decode \
        --schedule-params heads_per_block=2 -o "$work/lib_small"
    contains "$work/err.txt" "heads_per_block must be 1 where a block's tile fills 16 of the warp's 32 lanes (head_dim 16 over 16 lanes per row, query_tile 1), got 2" \
        "a GPU state a lane's registers cannot hold is refused before Halide sees it"
    printf 'attention huge_head {\n  heads = 2\n  head_dim = 1024\n}\n' \
        >"$work/huge_head.attn"
    expect 1 "a layer whose smallest GPU tiles exceed a block's shared memory" "$attngen" compile \
        "$work/huge_head.attn" --target x86-64-linux-opencl -o "$work/lib_huge"
    contains "$work/err.txt" "smallest tiles, query_tile=1, step_keys=4 and heads_per_block=1, are too large for this layer" \
        "a layer the GPU schedule cannot fit is refused with the tiles it tried"
    expect 1 "autoscheduler baselines on an ahead-of-time target" "$attngen" tune "$spec" \
        --layer alibi --shapes 1,40 --target arm-64-linux --trials 2 --baselines Li2018
    expect 1 "tune without a budget" "$attngen" tune "$spec" --layer alibi --shapes 1,8
    expect 1 "tune a bad shard" "${tune[@]}" --shard 2/2
    expect 1 "tune an unknown autoscheduler" "${tune[@]}" --baselines Adams2020
    expect 1 "tune a target that is not one" "${tune[@]}" --target vax-64-linux
    expect 1 "tune an unknown parameter" "${tune[@]}" --space tile=4
    expect 1 "export a missing log" "$attngen" tune export "$work/missing.jsonl"
    expect 1 "compile with a bad shape class" "$attngen" compile "$spec" --target host \
        --shape-class medium -o "$work/lib_bad"

    # A layer with a KV cache: check shows it; run and tune, which do not fill caches, refuse it.
    echo "attention cached { heads = 2; head_dim = 16; mask = causal; cache = paged(16) }" \
        > "$work/cached.attn"
    expect 0 "check a cached layer" "$attngen" check "$work/cached.attn"
    contains "$work/out.txt" "cache=paged(16) cache_dtype=f32" "check shows the cache"
    expect 1 "run a cached layer" "$attngen" run "$work/cached.attn" --shape 2,13 --runs 1
    contains "$work/err.txt" "layer 'cached' has a KV cache (cache = paged(16))" \
        "run says why it refuses a cached layer"
}

# layers: every layer of every spec in examples/ and tests/ generates and matches the reference.
part_layers() {
    shopt -s nullglob
    for spec_file in "$source"/examples/*.attn "$source"/examples/*/*.attn \
                     "$source"/tests/specs/*.attn "$source"/tests/layers/*.attn; do
        expect 0 "check $spec_file" "$attngen" check "$spec_file"
        cp "$work/out.txt" "$work/layers.txt"
        for layer in $(sed -n 's/^  \([A-Za-z_][A-Za-z0-9_]*\): .*/\1/p' "$work/layers.txt"); do
            expect 0 "run $layer of $spec_file" "$attngen" run "$spec_file" --layer "$layer" \
                --shape 2,13 --runs 1
            contains "$work/out.txt" ": ok" "$layer of $spec_file matches the reference"
        done
    done
}

for name in basics tune targets layers; do
    if [ "$part" = all ] || [ "$part" = "$name" ]; then
        "part_$name"
    fi
done

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
