"""The PyTorch peer of conv2d_cpu: the same ResNet-20 layer shapes through PyTorch's CPU convolution
(oneDNN), forward, input gradient and weight gradient, fastest of --repeats calls.

    /usr/bin/python3 benchmarks/conv2d_cpu_torch.py --threads 2 --batch-size 128 --repeats 10
    /usr/bin/python3 benchmarks/conv2d_cpu_torch.py --threads 1 --clock cpu --repeats 30

--clock cpu times the process's CPU time (time.process_time), as conv2d_cpu's --clock cpu; --dtype
bf16 runs the convolutions in bfloat16 (what autocast(cpu, bfloat16) gives them).
"""
import argparse
import time

import torch
import torch.nn.grad

LAYERS = [
    ("stem 1->16 3x3", 1, 16, 28, 3, 1, 1),
    ("stage1 16->16 3x3", 16, 16, 28, 3, 1, 1),
    ("down 16->32 3x3/2", 16, 32, 28, 3, 2, 1),
    ("short 16->32 1x1/2", 16, 32, 28, 1, 2, 0),
    ("stage2 32->32 3x3", 32, 32, 14, 3, 1, 1),
    ("down 32->64 3x3/2", 32, 64, 14, 3, 2, 1),
    ("short 32->64 1x1/2", 32, 64, 14, 1, 2, 0),
    ("stage3 64->64 3x3", 64, 64, 7, 3, 1, 1),
]

# conv2d_cpu.cpp's kResnet50Layers: ResNet-50's kinds of convolution at 224x224.
RESNET50_LAYERS = [
    ("stem 3->64 7x7/2", 3, 64, 224, 7, 2, 3),
    ("l1 64->64 1x1", 64, 64, 56, 1, 1, 0),
    ("l1 64->64 3x3", 64, 64, 56, 3, 1, 1),
    ("l1 64->256 1x1", 64, 256, 56, 1, 1, 0),
    ("l2 128->128 3x3/2", 128, 128, 56, 3, 2, 1),
    ("l2 256->512 1x1/2", 256, 512, 56, 1, 2, 0),
    ("l2 128->128 3x3", 128, 128, 28, 3, 1, 1),
    ("l3 256->256 3x3", 256, 256, 14, 3, 1, 1),
    ("l3 1024->256 1x1", 1024, 256, 14, 1, 1, 0),
    ("l4 512->512 3x3", 512, 512, 7, 3, 1, 1),
    ("l4 2048->512 1x1", 2048, 512, 7, 1, 1, 0),
]


def best_ms(repeats, fn, clock):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, (clock() - t0) * 1e3)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"])
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    parser.add_argument("--model", default="resnet20", choices=["resnet20", "resnet50"])
    parser.add_argument("--only", default="", help="time only the layers whose name contains this")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    conv = torch.ops.aten.convolution_backward
    print(f"torch {torch.__version__} conv2d, {args.dtype}, batch {args.batch_size}, "
          f"{args.threads} threads, {args.clock} clock: ms per call (GFLOP/s)")
    print(f"{'layer':<20} {'forward':>18} {'input grad':>18} {'weight grad':>18}")
    total = 0.0
    for name, cin, cout, side, k, s, p in (RESNET50_LAYERS if args.model == "resnet50" else LAYERS):
        if args.only not in name:
            continue
        x = torch.randn(args.batch_size, cin, side, side, dtype=dtype)
        w = torch.randn(cout, cin, k, k, dtype=dtype)
        out = torch.nn.functional.conv2d(x, w, None, s, p)
        g = torch.randn_like(out)
        gflop = 2.0 * out.numel() * cin * k * k / 1e9

        def forward():
            torch.nn.functional.conv2d(x, w, None, s, p)

        def input_grad():
            conv(g, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [True, False, False])

        def weight_grad():
            conv(g, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [False, True, False])

        with torch.no_grad():
            times = [best_ms(args.repeats, f, clock) for f in (forward, input_grad, weight_grad)]
        total += sum(times)
        print(f"{name:<20}" + "".join(f" {t:8.2f} ({gflop / (t / 1e3):6.1f})" for t in times))
    print(f"total: {total:.1f} ms per batch for one call of each kernel on each layer shape")


if __name__ == "__main__":
    main()
