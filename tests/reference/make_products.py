#!/usr/bin/env python3
"""Writes products.json: PyTorch 1.13's cumprod and prod on a [3, 4, 5] f64 tensor holding zeros
(lines with none, one and two of them): outputs, and the gradients of sum(out * grad_output).
tests/test_products.cpp checks kiln against them.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_products.py
"""
import json
import math
import pathlib

import torch

SHAPE = (3, 4, 5)
ZEROS = [7, 21, 23, 40, 44, 48, 55]  # flat positions set to 0


def base():
    n = math.prod(SHAPE)
    values = [0.6 + 0.8 * abs(math.sin(1.7 * i + 0.3)) for i in range(n)]
    for i in ZEROS:
        values[i] = 0.0
    return torch.tensor(values, dtype=torch.float64).reshape(SHAPE)


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
        case("cumprod", {"dim": 2}, lambda x: torch.cumprod(x, 2)),
        case("cumprod", {"dim": 0}, lambda x: torch.cumprod(x, 0)),
        case("prod", {"dims": [2], "keepdim": False}, lambda x: torch.prod(x, 2)),
        case("prod", {"dims": [1], "keepdim": True}, lambda x: torch.prod(x, 1, keepdim=True)),
        case("prod", {"dims": [0, 2], "keepdim": False},
             lambda x: torch.prod(torch.prod(x, 2), 0)),
        case("prod", {"dims": [], "keepdim": False}, lambda x: torch.prod(x[:, :, 1:3])),
    ]
    ints = torch.tensor([[2, -3, 1], [4, 0, 5]])
    integers = {"input": ints.flatten().tolist(), "prod_1": torch.prod(ints, 1).tolist(),
                "cumprod_1": torch.cumprod(ints, 1).flatten().tolist()}
    out = pathlib.Path(__file__).with_name("products.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_products.py",
                               "torch": torch.__version__, "shape": list(SHAPE),
                               "input": base().flatten().tolist(), "cases": cases,
                               "integers": integers}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
