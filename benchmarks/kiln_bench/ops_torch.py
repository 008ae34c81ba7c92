#!/usr/bin/env python3
"""PyTorch peer of `kiln-bench ops`: the same ops, sizes, timing (the median of --repeats, the
device synchronised around each call) and lines, so the two can run one after the other on one
machine and be compared line by line.

    python3 benchmarks/kiln_bench/ops_torch.py --device cuda [--csv ops_torch.csv]
"""
import argparse
import time

import torch


def median_ms(f, repeats, device):
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    f()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--log2", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--csv")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    log2 = 16 if args.smoke else (args.log2 or (28 if gpu else 24))
    n = 1 << log2
    side = 128 if args.smoke else (8192 if gpu else 1024)
    square = 256 if args.smoke else (16384 if gpu else 2048)
    repeats = 2 if args.smoke else args.repeats
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    with torch.no_grad():
        a, b = torch.randn(n, device=device), torch.randn(n, device=device)
        m = torch.randn(square, square, device=device)
        logits = torch.randn(square // 4, square, device=device)
        x, y = torch.randn(side, side, device=device), torch.randn(side, side, device=device)
        vector_bytes, square_bytes = n * 4.0, square * square * 4.0
        rows = []

        def bandwidth(op, shape, nbytes, f):
            ms = median_ms(f, repeats, device)
            rows.append([op, shape, ms, nbytes / (ms * 1e-3) / 1e9, "GB/s", None])

        vec, mat = f"f32 2^{log2}", f"[{square}, {square}]"
        bandwidth("copy", vec, 2 * vector_bytes, lambda: a.clone())
        copy_gbps = rows[-1][3]
        bandwidth("add", vec, 3 * vector_bytes, lambda: a + b)
        bandwidth("relu", vec, 2 * vector_bytes, lambda: torch.relu(a))
        bandwidth("sum", vec, vector_bytes, lambda: a.sum())
        bandwidth("sum rows (dim 1)", mat, square_bytes, lambda: m.sum(1))
        bandwidth("sum cols (dim 0)", mat, square_bytes, lambda: m.sum(0))
        bandwidth("softmax rows", f"[{square // 4}, {square}]", 2 * square_bytes / 4,
                  lambda: torch.softmax(logits, 1))
        if args.smoke:
            norm_shapes = [(4, 8, 16, 16)]
        else:
            norm_shapes = [(128, 64, 112, 112), (128, 512, 28, 28)] if gpu else [(32, 64, 56, 56)]
        for shape in norm_shapes:
            channels = shape[1]
            with torch.enable_grad():
                inp = torch.randn(shape, device=device, requires_grad=True)
                grad = torch.randn(shape, device=device)
                weight = torch.ones(channels, device=device, requires_grad=True)
                bias = torch.zeros(channels, device=device, requires_grad=True)
                running_mean = torch.zeros(channels, device=device)
                running_var = torch.ones(channels, device=device)

                def norm():
                    inp.grad = weight.grad = bias.grad = None
                    with torch.enable_grad():
                        torch.nn.functional.batch_norm(inp, running_mean, running_var, weight,
                                                       bias, True).backward(grad)

                bandwidth("batch_norm train fwd+bwd", "[" + ", ".join(map(str, shape)) + "]",
                          8.0 * inp.numel() * 4, norm)
        for r in rows:
            r[5] = r[3] / copy_gbps

        def flops(op, p, q, tf32):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            ms = median_ms(lambda: p @ q, repeats, device)
            torch.backends.cuda.matmul.allow_tf32 = False
            # A CPU's rate in GFLOP/s, as kiln-bench's.
            unit, name = (1e12, "TFLOP/s") if device.type == "cuda" else (1e9, "GFLOP/s")
            rows.append([op, f"{side}^3", ms, 2.0 * side ** 3 / (ms * 1e-3) / unit, name, None])

        flops("matmul f32", x, y, False)
        if gpu:
            flops("matmul f32 (tf32)", x, y, True)
        flops("matmul bf16", x.bfloat16(), y.bfloat16(), False)
        tiny = torch.randn(16, device=device)
        calls = 100 if args.smoke else 20000

        def many():
            for _ in range(calls):
                tiny + tiny

        tiny_ms = median_ms(many, repeats, device)
        rows.append(["add tiny", "[16]", tiny_ms / calls, 1e3 * tiny_ms / calls, "us/op", None])

    print(f"torch {torch.__version__} ops on {device}, median of {repeats} repeats each")
    for op, shape, ms, rate, unit, of_copy in rows:
        line = f"torch {op} {shape}: {ms:.3f} ms, {rate:.1f} {unit}"
        if of_copy is not None:
            line += f" ({100 * of_copy:.0f}% of copy)"
        print(line)
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("tool,device,op,shape,ms,rate,unit,of_copy\n")
            for op, shape, ms, rate, unit, of_copy in rows:
                f.write(f'torch,{device},"{op}","{shape}",{ms:.6f},{rate:.3f},{unit},'
                        f'{"" if of_copy is None else f"{of_copy:.4f}"}\n')


if __name__ == "__main__":
    main()
