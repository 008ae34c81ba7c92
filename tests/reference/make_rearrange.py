#!/usr/bin/env python3
"""Writes rearrange.json: PyTorch 1.13's flip, roll, repeat, tile, tril, triu, all and any on a
[2, 3, 4] f64 tensor (and a bool one): outputs, and the gradients of sum(out * grad_output) where
the op has one. tests/test_rearrange.cpp checks kiln against them.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_rearrange.py
"""
import json
import math
import pathlib

import torch

SHAPE = (2, 3, 4)


def base():
    n = math.prod(SHAPE)
    return torch.tensor([math.sin(1.1 * i + 0.4) for i in range(n)],
                        dtype=torch.float64).reshape(SHAPE)


def case(op, args, fn):
    x = base().requires_grad_()
    out = fn(x)
    g = torch.tensor([math.cos(0.7 * i) for i in range(out.numel())],
                     dtype=torch.float64).reshape(out.shape)
    (out * g).sum().backward()
    return {"op": op, "args": args, "shape": list(out.shape),
            "output": out.detach().flatten().tolist(), "grad_output": g.flatten().tolist(),
            "input_grad": x.grad.flatten().tolist()}


def main():
    cases = [
        case("flip", {"dims": [0, 2]}, lambda x: torch.flip(x, [0, 2])),
        case("flip", {"dims": [-2]}, lambda x: torch.flip(x, [-2])),
        case("roll", {"shifts": [1, -5], "dims": [0, 2]}, lambda x: torch.roll(x, (1, -5), (0, 2))),
        case("roll", {"shifts": [7], "dims": []}, lambda x: torch.roll(x, 7)),
        case("repeat", {"repeats": [2, 1, 3, 2]}, lambda x: x.repeat(2, 1, 3, 2)),
        case("tile", {"repeats": [2, 1]}, lambda x: torch.tile(x, (2, 1))),
        case("tril", {"diagonal": 0}, lambda x: torch.tril(x)),
        case("tril", {"diagonal": -1}, lambda x: torch.tril(x, -1)),
        case("triu", {"diagonal": 1}, lambda x: torch.triu(x, 1)),
        case("triu", {"diagonal": -2}, lambda x: torch.triu(x, -2)),
    ]
    b = base() > -0.3
    logical = {"input": b.flatten().int().tolist(),
               "all_1": torch.all(b, 1).flatten().int().tolist(),
               "any_2_keep": torch.any(b, 2, keepdim=True).flatten().int().tolist(),
               "all": bool(torch.all(b)), "any": bool(torch.any(b))}
    out = pathlib.Path(__file__).with_name("rearrange.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_rearrange.py",
                               "torch": torch.__version__, "shape": list(SHAPE),
                               "input": base().flatten().tolist(), "cases": cases,
                               "logical": logical}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
