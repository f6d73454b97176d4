#!/usr/bin/env bash
# Shows whether a change to dsl/, schedules/ or generators/ changed the code attngen generates.
#
#   tools/compare_generated.sh snapshot BUILD DIR   copy BUILD's generated objects and headers to DIR
#   tools/compare_generated.sh compare BEFORE AFTER compare two snapshots (or build trees)
#
# Every layer a build generates (tests, examples, benchmarks; every CPU variant and the GPU
# objects, whose PTX or OpenCL source is embedded) is a `NAME_halide-TARGET.o` beside its
# `NAME_halide.h`. Halide and LLVM emit them deterministically, so a refactoring that keeps the
# lowered code keeps them byte-identical. For each object that differs, the disassembly is
# compared too (function symbols are named after Funcs, so a renamed stage differs only there),
# and the first lines of its diff are printed. Exit status: 0 when every object and header is
# identical, 1 when any differs or is missing on one side, 2 on a usage error.
set -euo pipefail

usage() {
    sed -n '4,5p' "$0" | sed 's/^# *//' >&2
    exit 2
}

generated_files() {
    (cd "$1" && find . \( -name '*_halide-*.o' -o -name '*_halide.h' \) -type f | sort)
}

snapshot() {
    local build=$1 dir=$2
    [[ -d $build ]] || { echo "compare_generated: no build tree at $build" >&2; exit 2; }
    mkdir -p "$dir"
    generated_files "$build" | (cd "$build" && tar cf - -T -) | tar xf - -C "$dir"
    echo "$(generated_files "$dir" | wc -l) generated files copied to $dir"
}

disassembly() {
    objdump -d --no-show-raw-insn "$1" | sed -E 's/^ *[0-9a-f]+:\t//; /file format/d'
}

compare() {
    local before=$1 after=$2 same=0 differ=0 missing=0
    local files dir
    for dir in "$before" "$after"; do
        [[ -d $dir ]] || { echo "compare_generated: no directory $dir" >&2; exit 2; }
    done
    files=$( (generated_files "$before"; generated_files "$after") | sort -u)
    if [[ -z $files ]]; then
        echo "compare_generated: no generated files in $before or $after: build first" >&2
        exit 2
    fi
    while read -r file; do
        if [[ ! -f $before/$file || ! -f $after/$file ]]; then
            echo "only in $([[ -f $before/$file ]] && echo "$before" || echo "$after"): $file"
            missing=$((missing + 1))
        elif cmp -s "$before/$file" "$after/$file"; then
            same=$((same + 1))
        else
            differ=$((differ + 1))
            echo "differs: $file"
            if [[ $file == *.o ]]; then
                diff <(disassembly "$before/$file") <(disassembly "$after/$file") | head -20 || true
            else
                diff "$before/$file" "$after/$file" | head -20 || true
            fi
        fi
    done <<<"$files"
    echo "$same identical, $differ different, $missing on one side only"
    [[ $differ -eq 0 && $missing -eq 0 ]]
}

[[ $# -eq 3 ]] || usage
case $1 in
snapshot) snapshot "$2" "$3" ;;
compare) compare "$2" "$3" ;;
*) usage ;;
esac
