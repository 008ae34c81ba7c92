#!/usr/bin/env python3
"""PyTorch peer of attention_cpu.cpp: attention forward and backward as PyTorch 1.13's
nn.MultiheadAttention computes it inside (F.multi_head_attention_forward without need_weights:
q scaled by 1/sqrt(head_dim), bmm with k transposed, softmax, bmm with v; 1.13 has no fused CPU
attention), on [batch * heads, L, head_dim] tensors; the minimum over repeats, in attention_cpu's
format.

    /usr/bin/python3 benchmarks/attention_cpu_torch.py --threads 2 --batch 2 --heads 4 --length 1024
"""
import argparse
import math
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shape = (args.batch * args.heads, args.length, args.head_dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    mask = None
    if args.causal:
        mask = torch.full((args.length, args.length), float("-inf")).triu(1)
    grad = torch.ones(shape)
    best_forward = best_total = math.inf
    for r in range(args.repeats + 1):  # the first run warms up
        for t in (q, k, v):
            t.grad = None
        t0 = time.perf_counter()
        scores = torch.bmm(q / math.sqrt(args.head_dim), k.transpose(-2, -1))
        if mask is not None:
            scores = scores + mask
        out = torch.bmm(torch.softmax(scores, dim=-1), v)
        t1 = time.perf_counter()
        out.backward(grad)
        t2 = time.perf_counter()
        if r > 0:
            best_forward = min(best_forward, (t1 - t0) * 1e3)
            best_total = min(best_total, (t2 - t0) * 1e3)
    print(f"torch {torch.__version__} attention cpu f32 [{args.batch}, {args.heads}, {args.length}, "
          f"{args.head_dim}]{' causal' if args.causal else ''} threads {args.threads}: "
          f"{best_total:.2f} ms (forward {best_forward:.2f})")


if __name__ == "__main__":
    main()
