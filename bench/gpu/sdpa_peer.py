#!/usr/bin/env python3
"""The GPU benchmark's peer: PyTorch's scaled_dot_product_attention on the same grid as
bench_gpu, TF32 off. Prefill (H=16, D 64 and 128, no mask and causal, B x L): its math backend
and its memory-efficient backend in float32 (the like-for-like peers), and its flash backend in
float16 (context). Decode (Lq=1, H query heads on HKV kv heads, D=128, B x Lk, enable_gqa): the
same three. Random inputs in [-1, 1); the median of RUNS runs after a warm-up, timed with CUDA
events. Writes one line per case, -1 where a backend failed (out of memory, no kernel):
  "prefill D causal B L math_ms memeff_ms flash_ms"
  "decode H HKV D B LK math_ms memeff_ms flash_ms"

usage: sdpa_peer.py OUT_FILE [--batches 1,2,4,8] [--lengths 512,...,8192] [--runs 5]
                             [--decode-batches 1,4,8] [--decode-lengths 1024,...,32768]
"""
import argparse
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

HEADS = 16
DECODE_HEADS, DECODE_KV_HEADS, DECODE_HEAD_DIM = 32, 8, 128
BACKENDS = ((SDPBackend.MATH, torch.float32), (SDPBackend.EFFICIENT_ATTENTION, torch.float32),
            (SDPBackend.FLASH_ATTENTION, torch.float16))


def time_ms(backend, dtype, q_shape, kv_shape, causal, runs):
    q = torch.rand(q_shape, device="cuda", dtype=dtype) * 2 - 1
    k, v = (torch.rand(kv_shape, device="cuda", dtype=dtype) * 2 - 1 for _ in range(2))
    gqa = q_shape[1] != kv_shape[1]
    times = []
    with sdpa_kernel(backend):
        for run in range(runs + 1):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
            stop.record()
            torch.cuda.synchronize()
            if run > 0:
                times.append(start.elapsed_time(stop))
    return statistics.median(times)


def cells(label, q_shape, kv_shape, causal, runs):
    result = []
    for backend, dtype in BACKENDS:
        try:
            result.append(time_ms(backend, dtype, q_shape, kv_shape, causal, runs))
        except RuntimeError as error:  # out of memory, no kernel for these arguments
            print(f"sdpa_peer: {label} {backend}: {str(error).splitlines()[0]}", file=sys.stderr)
            result.append(-1.0)
        torch.cuda.empty_cache()
    return " ".join(f"{ms:.4f}" for ms in result)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--lengths", default="512,1024,2048,4096,8192")
    parser.add_argument("--decode-batches", default="1,4,8")
    parser.add_argument("--decode-lengths", default="1024,4096,16384,32768")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_peer: skipped: PyTorch sees no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ints = lambda text: [int(item) for item in text.split(",") if item]
    with open(args.out, "w") as out:
        out.write(f"# {torch.cuda.get_device_name()} torch {torch.__version__}\n")
        for head_dim in (64, 128):
            for causal in (False, True):
                for batch in ints(args.batches):
                    for length in ints(args.lengths):
                        shape = (batch, HEADS, length, head_dim)
                        label = f"D={head_dim} causal={causal} B={batch} L={length}"
                        out.write(f"prefill {head_dim} {int(causal)} {batch} {length} "
                                  f"{cells(label, shape, shape, causal, args.runs)}\n")
                        out.flush()
        for batch in ints(args.decode_batches):
            for length in ints(args.decode_lengths):
                q_shape = (batch, DECODE_HEADS, 1, DECODE_HEAD_DIM)
                kv_shape = (batch, DECODE_KV_HEADS, length, DECODE_HEAD_DIM)
                label = f"decode B={batch} Lk={length}"
                out.write(f"decode {DECODE_HEADS} {DECODE_KV_HEADS} {DECODE_HEAD_DIM} {batch} "
                          f"{length} {cells(label, q_shape, kv_shape, False, args.runs)}\n")
                out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
