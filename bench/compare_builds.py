#!/usr/bin/env python3
"""Times two builds of attngen against each other: runs BUILD/bench/bench_attention of each,
alternating A, B, A, B, ... for the given number of rounds, and prints, for every row of every
table, the median over the rounds of B's time / A's time (below 1: B is faster) with the
smallest and largest round. Timings on shared machines drift between minutes; each round's
ratio compares two runs minutes apart at most, and the median of several rounds is quoted.

    bench/compare_builds.py --a build-halide14 --b build --rounds 3 [--keep DIR] \
        -- --no-peers --ref-max-len 0 --no-memory          (bench_attention's options)

Timed columns: 'attngen ms' (prefill, decode, end-to-end), 'contig ms' and 'paged ms' (cached
decode), 'plain ms' and 'rope ms' (rotary embeddings). Rows are matched by their leading
columns; a row missing from either run is reported as such."""
import argparse
import os
import statistics
import subprocess
import sys

TIMED = ("attngen ms", "contig ms", "paged ms", "plain ms", "rope ms")


def parse(text):
    """{(table, row key, column): ms} from one bench_attention output; a table is named by the
    columns that key its rows (e.g. 'D, mask, L' for prefill, 'Lk' for decode)."""
    times = {}
    header = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 3:
            if not line.strip():
                header = None
            continue
        if header is None:
            if any(c in TIMED for c in cells):
                header = cells
            continue
        if len(cells) != len(header):
            continue
        first_timed = min(i for i, c in enumerate(header) if c in TIMED)
        table = ", ".join(header[:first_timed])
        key = " | ".join(cells[:first_timed])
        for i, name in enumerate(header):
            if name in TIMED:
                try:
                    times[(table, key, name)] = float(cells[i])
                except ValueError:
                    pass
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="the build compared against (denominator)")
    parser.add_argument("--b", required=True, help="the build measured (numerator)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", help="a directory to write each run's output to")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    bench_args = [a for a in args.bench_args if a != "--"]
    if args.rounds < 1:
        sys.exit("compare_builds: --rounds must be at least 1")
    runs = {"a": [], "b": []}
    for r in range(args.rounds):
        for side in ("a", "b"):
            build = getattr(args, side)
            binary = os.path.join(build, "bench", "bench_attention")
            print(f"round {r + 1}/{args.rounds}: {binary}", file=sys.stderr, flush=True)
            out = subprocess.run([binary] + bench_args, check=True, capture_output=True,
                                 text=True).stdout
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                with open(os.path.join(args.keep, f"{side}{r + 1}.txt"), "w") as f:
                    f.write(out)
            runs[side].append(parse(out))

    keys = list(dict.fromkeys(k for run in runs["a"] + runs["b"] for k in run))
    print(f"B = {args.b}, A = {args.a}; {args.rounds} rounds (A, B alternating); "
          "ratio = median over the rounds of B ms / A ms (below 1: B is faster)")
    width = max(len(f"{t} | {k} | {c}") for t, k, c in keys)
    print(f"{'table | row | column':<{width}} |   A ms |   B ms |  ratio | min-max")
    ratios_all = []
    for key in keys:
        a = [run[key] for run in runs["a"] if key in run]
        b = [run[key] for run in runs["b"] if key in run]
        label = " | ".join(key)
        if len(a) != args.rounds or len(b) != args.rounds:
            print(f"{label:<{width}} | missing in {'A' if len(a) < args.rounds else 'B'}")
            continue
        ratios = [y / x for x, y in zip(a, b) if x > 0]
        if not ratios:
            continue
        ratios_all.append(statistics.median(ratios))
        print(f"{label:<{width}} | {statistics.median(a):6.3f} | {statistics.median(b):6.3f} | "
              f"{statistics.median(ratios):6.3f} | {min(ratios):.3f}-{max(ratios):.3f}")
    if ratios_all:
        print(f"rows: {len(ratios_all)}; median of the rows' ratios "
              f"{statistics.median(ratios_all):.3f}, range {min(ratios_all):.3f}-"
              f"{max(ratios_all):.3f}")


if __name__ == "__main__":
    main()
