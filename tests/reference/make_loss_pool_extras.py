#!/usr/bin/env python3
"""Writes loss_pool_extras.json: PyTorch 1.13's cosine_embedding_loss (three reductions and
margins) and adaptive_max_pool2d (windows that tile and windows that overlap, a tie inside one)
on f64 inputs: outputs and the gradients of sum(out * grad_output).
tests/test_loss_pool_extras.cpp checks kiln against them.

Run with a python3 that has torch:  /usr/bin/python3 tests/reference/make_loss_pool_extras.py
"""
import json
import math
import pathlib

import torch
import torch.nn.functional as F


def values(shape, a, b):
    n = math.prod(shape)
    return torch.tensor([math.sin(a * i + b) for i in range(n)], dtype=torch.float64).reshape(shape)


def flat(t):
    return t.detach().flatten().tolist()


def main():
    cases = {}
    x1 = values([5, 4], 1.1, 0.4).requires_grad_()
    x2 = values([5, 4], 0.6, 1.3).requires_grad_()
    target = torch.tensor([1, -1, 1, -1, -1])
    for reduction, margin in [("mean", 0.2), ("none", -0.3), ("sum", 0.0)]:
        x1.grad, x2.grad = None, None
        out = F.cosine_embedding_loss(x1, x2, target, margin=margin, reduction=reduction)
        g = values(list(out.shape), 0.3, 0.8) if out.dim() else torch.tensor(1.3, dtype=torch.float64)
        (out * g).sum().backward()
        cases["cosine_" + reduction] = {
            "margin": margin, "reduction": reduction, "output": flat(out), "grad_output": flat(g),
            "x1_grad": flat(x1.grad), "x2_grad": flat(x2.grad)}
    x = values([2, 3, 7, 5], 1.3, 0.2)
    x[0, 0, 1, 1] = x[0, 0, 0, 0]  # a tie inside a window: the gradient goes to the first
    x.requires_grad_()
    for oh, ow in [(3, 2), (2, 5), (7, 5), (1, 1), (4, 4)]:
        x.grad = None
        out = F.adaptive_max_pool2d(x, (oh, ow))
        g = values(list(out.shape), 0.3, 0.8)
        (out * g).sum().backward()
        cases[f"amp_{oh}_{ow}"] = {"output": flat(out), "grad_output": flat(g),
                                   "input_grad": flat(x.grad), "shape": list(out.shape)}
    path = pathlib.Path(__file__).with_name("loss_pool_extras.json")
    path.write_text(json.dumps({"made_by": "tests/reference/make_loss_pool_extras.py",
                                "torch": torch.__version__, "x1": flat(x1), "x2": flat(x2),
                                "target": target.tolist(), "x": flat(x), "cases": cases}))
    print(f"wrote {path} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
