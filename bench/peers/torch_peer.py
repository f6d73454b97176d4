#!/usr/bin/env python3
"""The benchmark's PyTorch peer: torch.nn.functional.scaled_dot_product_attention on the CPU (for
float32 inputs without an attention mask PyTorch runs its fused flash-attention kernel).

bench_attention starts it as `torch_peer.py THREADS` and talks to it in lines over stdin/stdout,
the protocol of ggml_peer.cpp:

    load DIR B H HKV LQ LK D CAUSAL COPIES   reads DIR/query.f32, key.f32, value.f32 (B, H or HKV,
                                             L, D row-major), runs once, writes DIR/torch.out
                                             (B, H, LQ, D); answers "ok sdpa" or "error WHY"
    time REWARM                              times one call, after an untimed one when REWARM
                                             is 1; answers "MS"
    quit
"""
import sys
import time

import torch
from torch.nn.functional import scaled_dot_product_attention


def main():
    threads = int(sys.argv[1])
    torch.set_num_threads(threads)
    print(f"ready PyTorch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()})",
          flush=True)
    copies, calls, next_copy = [], None, 0
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "load":
            try:
                directory = words[1]
                batch, heads, kv_heads, query_len, key_len, dim, causal, count = map(int, words[2:10])
                if causal and query_len != key_len:
                    # is_causal aligns the mask top-left, attngen's bottom-right: equal only here.
                    raise ValueError("causal rows need LQ == LK")

                def tensor(name, shape):
                    size = 1
                    for extent in shape:
                        size *= extent
                    return torch.from_file(f"{directory}/{name}.f32", size=size,
                                           dtype=torch.float32).view(shape)

                q = tensor("query", (batch, heads, query_len, dim))
                k = tensor("key", (batch, kv_heads, key_len, dim))
                v = tensor("value", (batch, kv_heads, key_len, dim))
                copies = [(q, k, v)] + [(q.clone(), k.clone(), v.clone()) for _ in range(count - 1)]
                gqa = heads != kv_heads

                def call(copy):
                    q, k, v = copy
                    return scaled_dot_product_attention(q, k, v, is_causal=bool(causal), enable_gqa=gqa)

                calls, next_copy = call, 0
                out = call(copies[0]).contiguous()
                written = torch.from_file(f"{directory}/torch.out", shared=True, size=out.numel(),
                                          dtype=torch.float32)
                written.copy_(out.view(-1))
                print("ok sdpa", flush=True)
            except (ValueError, IndexError, RuntimeError) as error:
                print(f"error {error}".replace("\n", " "), flush=True)
        elif words[0] == "time":
            if calls is None:
                print("error nothing loaded", flush=True)
                continue
            copy = copies[next_copy % len(copies)]
            next_copy += 1
            if words[1:] == ["1"]:
                calls(copy)
            start = time.perf_counter()
            calls(copy)
            print(f"{(time.perf_counter() - start) * 1e3}", flush=True)
        else:
            print(f"error unknown command: {line.strip()}", flush=True)


if __name__ == "__main__":
    main()
