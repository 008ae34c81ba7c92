#!/usr/bin/env python3
"""Writes group_norm.json: PyTorch 1.13's GroupNorm and InstanceNorm2d/1d (training with running
statistics, then eval) on [3, 6, 4, 5] and [3, 6, 7] f64 inputs with non-trivial affine
parameters: outputs, the gradients of sum(out * grad_output) for input and parameters, and the
running statistics after the step. tests/test_group_norm.cpp checks kiln against them.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_group_norm.py
"""
import json
import math
import pathlib

import torch


def values(n, a, b):
    return [math.sin(a * i + b) * (1.0 + 0.5 * math.cos(0.3 * i)) for i in range(n)]


def flat(t):
    return t.detach().flatten().tolist()


def run(module, shape):
    x = torch.tensor(values(math.prod(shape), 1.1, 0.4), dtype=torch.float64).reshape(shape)
    x.requires_grad_()
    out = module(x)
    g = torch.tensor(values(out.numel(), 0.7, 1.3), dtype=torch.float64).reshape(out.shape)
    (out * g).sum().backward()
    result = {"shape": list(shape), "input": flat(x), "output": flat(out),
              "grad_output": flat(g), "input_grad": flat(x.grad)}
    for name, p in module.named_parameters():
        result[name + "_grad"] = flat(p.grad)
    for name, b in module.named_buffers():
        result[name] = flat(b)
    return result


def affine(module, channels):
    with torch.no_grad():
        module.weight.copy_(torch.tensor(values(channels, 0.9, 0.2), dtype=torch.float64) + 1.5)
        module.bias.copy_(torch.tensor(values(channels, 0.5, 2.0), dtype=torch.float64))
    return module


def main():
    cases = {
        "group_norm_3": run(affine(torch.nn.GroupNorm(3, 6).double(), 6), (3, 6, 4, 5)),
        "group_norm_1_plain": run(torch.nn.GroupNorm(1, 6, affine=False).double(), (3, 6, 7)),
        "instance_norm_2d": run(affine(torch.nn.InstanceNorm2d(
            6, affine=True, track_running_stats=True, momentum=0.3).double(), 6), (3, 6, 4, 5)),
        "instance_norm_1d": run(torch.nn.InstanceNorm1d(6).double(), (3, 6, 7)),
    }
    tracked = torch.nn.InstanceNorm2d(6, track_running_stats=True, momentum=0.3).double()
    run(tracked, (3, 6, 4, 5))
    tracked.eval()
    cases["instance_norm_2d_eval"] = run(tracked, (3, 6, 4, 5))
    out = pathlib.Path(__file__).with_name("group_norm.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_group_norm.py",
                               "torch": torch.__version__, "cases": cases}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
