#!/usr/bin/env bash
# README's first layer works as written: its .attn block passes `attngen check` and generates,
# and its C++ block compiles (warnings as errors), links against the generated library and the
# runtime, and runs; README's later .attn blocks pass `attngen check`. Fails when any drifts
# from the code.
# usage: readme_test.sh ATTNGEN SOURCE_DIR WORK_DIR CXX RUNTIME_LIB HALIDE_RUNTIME_INCLUDE
set -euo pipefail
attngen=$1 source=$2 work=$3 cxx=$4 runtime=$5 halide_include=$6
rm -rf "$work" && mkdir -p "$work"

# The first fenced block of each language.
block() {
    awk -v fence="\`\`\`$1" '$0 == fence { inside = 1; next }
                             inside && $0 == "```" { exit }
                             inside { print }' "$source/README.md"
}
block attn > "$work/my_attention.attn"
block cpp > "$work/main.cpp"
for file in my_attention.attn main.cpp; do
    [ -s "$work/$file" ] || { echo "FAILED: README has no block for $file"; exit 1; }
done
grep -q "attngen_add_library(my_attention SPEC my_attention.attn" "$source/README.md" ||
    { echo "FAILED: README's CMake block does not generate my_attention from my_attention.attn"; exit 1; }

"$attngen" check "$work/my_attention.attn"
# Every other .attn block of README is a valid layer too.
awk -v dir="$work" '$0 == "```attn" { inside = 1; n++; next }
                    inside && $0 == "```" { inside = 0; next }
                    inside { print > (dir "/readme_block_" n ".attn") }' "$source/README.md"
for block_file in "$work"/readme_block_*.attn; do
    "$attngen" check "$block_file" > /dev/null
done
"$attngen" compile "$work/my_attention.attn" --target host -o "$work/lib"
"$cxx" -std=c++17 -Wall -Wextra -Werror "$work/main.cpp" -I "$work/lib" \
    -I "$source/runtime/include" -I "$halide_include" "$work/lib/libmy_attention.a" "$runtime" \
    -lpthread -ldl -o "$work/app"
"$work/app" | tee "$work/out.txt"
grep -q "^out\[0\]\[0\]\[99\]\[0\] = " "$work/out.txt" ||
    { echo "FAILED: README's program printed no output row"; exit 1; }
echo "README's first layer: ok"
