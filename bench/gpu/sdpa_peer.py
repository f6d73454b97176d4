#!/usr/bin/env python3
"""The GPU benchmark's peer: PyTorch's scaled_dot_product_attention on the same grid as
bench_gpu (H=16, D 64 and 128, no mask and causal, B x L), its math backend in float32 (TF32
off: the like-for-like peer) and its flash backend in float16 (context). Random inputs; the
median of RUNS runs after a warm-up, timed with CUDA events. Writes one line per case:
"D causal B L math_ms flash_ms" (-1 where a backend failed, e.g. out of memory).

usage: sdpa_peer.py OUT_FILE [--batches 1,2,4,8] [--lengths 512,...,8192] [--runs 5]
"""
import argparse
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

HEADS = 16


def time_ms(backend, dtype, batch, length, head_dim, causal, runs):
    shape = (batch, HEADS, length, head_dim)
    q, k, v = (torch.rand(shape, device="cuda", dtype=dtype) * 2 - 1 for _ in range(3))
    times = []
    with sdpa_kernel(backend):
        for run in range(runs + 1):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            scaled_dot_product_attention(q, k, v, is_causal=causal)
            stop.record()
            torch.cuda.synchronize()
            if run > 0:
                times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--lengths", default="512,1024,2048,4096,8192")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_peer: skipped: PyTorch sees no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open(args.out, "w") as out:
        out.write(f"# {torch.cuda.get_device_name()} torch {torch.__version__}\n")
        for head_dim in (64, 128):
            for causal in (False, True):
                for batch in map(int, args.batches.split(",")):
                    for length in map(int, args.lengths.split(",")):
                        cells = []
                        for backend, dtype in ((SDPBackend.MATH, torch.float32),
                                               (SDPBackend.FLASH_ATTENTION, torch.float16)):
                            try:
                                cells.append(time_ms(backend, dtype, batch, length, head_dim,
                                                     causal, args.runs))
                            except RuntimeError as error:  # out of memory, no kernel
                                print(f"sdpa_peer: D={head_dim} causal={causal} B={batch} "
                                      f"L={length} {backend}: {str(error).splitlines()[0]}",
                                      file=sys.stderr)
                                cells.append(-1.0)
                            torch.cuda.empty_cache()
                        out.write(f"{head_dim} {int(causal)} {batch} {length} "
                                  f"{cells[0]:.4f} {cells[1]:.4f}\n")
                        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
