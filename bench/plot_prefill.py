#!/usr/bin/env python3
"""Plots bench_attention's prefill table as an SVG, with no dependencies beyond Python 3.

    ./build/bench/bench_attention --no-decode --no-cache --no-mha --no-rope --no-memory > run.txt
    python3 bench/plot_prefill.py run.txt docs/prefill.svg

One panel per (head_dim, mask): GFLOP/s against L (log scale) for attngen, the fused peers
(PyTorch's scaled_dot_product_attention, ggml's flash_attn_ext) and the two math-path peers, as
the table prints them (its GFLOP/s columns, not recomputed). A peer with "-" columns (not set up,
or stopped) is left out of the panel.
"""
import sys

# The prefill table's columns: D | mask | L | attngen ms | GFLOP/s | then ms | GFLOP/s | ratio for
# each peer in this order, then reference ms | ratio | check.
SERIES = [("attngen", "#1f77b4"), ("PyTorch SDPA", "#d62728"), ("ggml flash_attn_ext", "#9467bd"),
          ("OpenBLAS math path", "#ff7f0e"), ("oneDNN math path", "#2ca02c")]
GFLOPS_COLUMNS = [4, 6, 9, 12, 15]


def number(text):
    text = text.strip()
    return None if text == "-" else float(text)


def read_rows(path):
    panels = {}
    with open(path) as text:
        for line in text:
            cells = line.split("|")
            if len(cells) != 20 or cells[1].strip() not in ("none", "causal"):
                continue
            try:
                d, length = int(cells[0]), int(cells[2])
                gflops = [number(cells[column]) for column in GFLOPS_COLUMNS]
            except ValueError:
                continue
            panels.setdefault((d, cells[1].strip()), []).append((length, gflops))
    if not panels:
        sys.exit(f"{path}: no prefill rows (expected bench_attention's prefill table)")
    return panels


def svg(panels, title):
    width, height, margin = 330, 240, 48
    keys = sorted(panels)
    columns = 2
    rows = (len(keys) + columns - 1) // columns
    top = max(value for points in panels.values() for _, g in points for value in g if value is not None)
    ceiling = 50 * int(top / 50 + 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{columns * width}" '
           f'height="{rows * height + 60}" font-family="sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="18" font-size="13">{title}</text>']
    for i, (name, color) in enumerate(SERIES):
        x = 10 + 130 * i
        out.append(f'<line x1="{x}" y1="34" x2="{x + 20}" y2="34" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{x + 25}" y="38">{name}</text>')
    for index, key in enumerate(keys):
        ox = (index % columns) * width + margin
        oy = (index // columns) * height + 60
        pw, ph = width - margin - 28, height - margin - 20
        points = sorted(panels[key])
        lengths = [length for length, _ in points]
        lo, hi = min(lengths).bit_length(), max(lengths).bit_length()

        def px(length):
            return ox + (length.bit_length() - lo) / max(hi - lo, 1) * pw

        def py(value):
            return oy + ph - value / ceiling * ph

        out.append(f'<text x="{ox}" y="{oy - 6}">D={key[0]}, {key[1]}</text>')
        out.append(f'<rect x="{ox}" y="{oy}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        for value in range(0, ceiling + 1, 50):
            out.append(f'<text x="{ox - 6}" y="{py(value) + 4}" text-anchor="end">{value}</text>')
        for length in lengths:
            out.append(f'<text x="{px(length)}" y="{oy + ph + 14}" text-anchor="middle">{length}</text>')
        out.append(f'<text x="{ox + pw / 2}" y="{oy + ph + 28}" text-anchor="middle">L</text>')
        out.append(f'<text x="{ox - 36}" y="{oy + ph / 2}" transform="rotate(-90 {ox - 36} {oy + ph / 2})" '
                   f'text-anchor="middle">GFLOP/s</text>')
        for series, (_, color) in enumerate(SERIES):
            path = " ".join(f"{px(length):.1f},{py(g[series]):.1f}" for length, g in points
                            if g[series] is not None)
            if path:
                out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_prefill.py BENCH_OUTPUT OUT.svg")
    panels = read_rows(sys.argv[1])
    machine = "f32 prefill, B=1, H=8"
    with open(sys.argv[1]) as text:
        for line in text:
            if line.startswith("attngen vs") and ", CPU " in line:
                threads = line.split("threads ", 1)[1].split(",", 1)[0]
                machine += f", {threads} threads, {line.rsplit(', CPU ', 1)[1].strip()}"
                break
    with open(sys.argv[2], "w") as out:
        out.write(svg(panels, machine))


if __name__ == "__main__":
    main()
