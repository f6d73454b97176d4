#!/usr/bin/env bash
# Sets up the benchmark's fused peers in DIR (default bench/.peers), once; run again, it checks
# what is there and does only what is missing. Neither peer is needed to build or test attngen.
#   - PyTorch: a venv from python3 with torch from PyPI (its Linux wheel pulls CUDA libraries,
#     about 5 GiB in all, though the benchmark runs it on the CPU only);
#   - ggml: built from the copy in the llama-cpp-python source package on PyPI (pinned by version
#     and SHA-256), CPU backend, twice: -march=native as llama.cpp builds it by default, and
#     AVX2 without AVX-512; then bench/peers/ggml_peer.cpp against each.
# Needs python3 with venv (Debian: python3-venv), cmake, a C++ compiler and network access to PyPI.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/../.peers}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
jobs=$(nproc)

torch_version=2.15.0
llama_cpp_python_version=0.3.36
llama_cpp_python_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

if "$dir/venv/bin/python" -c "import numpy, torch" 2>/dev/null; then
    echo "PyTorch: $dir/venv has torch $("$dir/venv/bin/python" -c 'import torch; print(torch.__version__)')"
else
    echo "PyTorch: making $dir/venv with torch $torch_version (a download of about 5 GiB)"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "torch==$torch_version" numpy
fi

# build_ggml NAME CMAKE_OPTIONS...: ggml's CPU backend (installed in DIR/NAME-lib) and
# bench/peers/ggml_peer.cpp against it (DIR/NAME), unless DIR/NAME is there.
build_ggml() {
    local name=$1
    shift
    if [ -x "$dir/$name" ]; then
        echo "ggml: $dir/$name is there"
        return
    fi
    local archive="$dir/llama_cpp_python-$llama_cpp_python_version.tar.gz"
    if [ ! -f "$archive" ]; then
        echo "ggml: downloading llama-cpp-python $llama_cpp_python_version's source from PyPI"
        python3 - "$llama_cpp_python_version" "$archive" <<'PY'
import json, sys, urllib.parse, urllib.request
version, archive = sys.argv[1], sys.argv[2]
index = "https://pypi.org/pypi/llama-cpp-python/json"
with urllib.request.urlopen(index) as reply:
    files = json.load(reply)["releases"][version]
(url,) = [f["url"] for f in files if f["packagetype"] == "sdist"]
urllib.request.urlretrieve(urllib.parse.urljoin(index, url), archive + ".part")  # mirrors give relative URLs
PY
        mv "$archive.part" "$archive"
    fi
    echo "$llama_cpp_python_sha256  $archive" | sha256sum --check --quiet
    local src="$dir/$name-src" build="$dir/$name-build" prefix="$dir/$name-lib"
    rm -rf "$src" "$build"
    mkdir -p "$src"
    tar -xzf "$archive" -C "$src" --strip-components=4 \
        "llama_cpp_python-$llama_cpp_python_version/vendor/llama.cpp/ggml"
    touch "$src/ggml.pc.in" # the package leaves out the pkg-config template
    echo "ggml: building its CPU backend for $name ($*)"
    cmake -S "$src" -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DGGML_BLAS=OFF -DGGML_BUILD_TESTS=OFF \
        -DGGML_BUILD_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX="$prefix" "$@" > "$dir/$name-build.log"
    cmake --build "$build" --parallel "$jobs" --target install >> "$dir/$name-build.log"
    "${CXX:-c++}" -O2 -std=c++17 -Wall -Wextra -Werror -I"$prefix/include" \
        "$here/ggml_peer.cpp" -L"$prefix/lib" -lggml -lggml-cpu -lggml-base -fopenmp -pthread \
        -o "$dir/$name"
    rm -rf "$src" "$build"
    echo "ggml: built $dir/$name"
}

# What the CPU has (-march=native, llama.cpp's default), and AVX2 without AVX-512: the peer of
# `bench_attention --cpu-variant avx2`, which measures attngen's AVX2 code on an AVX-512 machine.
build_ggml ggml_peer -DGGML_NATIVE=ON
build_ggml ggml_peer_avx2 -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF
