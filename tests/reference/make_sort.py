#!/usr/bin/env python3
"""Writes sort.json: PyTorch 1.13's sort (stable), argsort, topk and the rounding ops on small f64
tensors with ties, NaN and halves: values, indices, and the gradients of sum(values * grad_output).
tests/test_sort.cpp checks kiln against them.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_sort.py
"""
import json
import math
import pathlib

import torch

SHAPE = (3, 4, 5)


def base():
    # Multiples of 0.5 in [-2, 2]: many ties in every row.
    n = math.prod(SHAPE)
    return torch.tensor([round(4 * math.sin(1.3 * i + 0.2)) / 2 for i in range(n)],
                        dtype=torch.float64).reshape(SHAPE)


def case(op, args, fn):
    x = base().requires_grad_()
    values, indices = fn(x)
    g = torch.tensor([math.cos(0.7 * i) for i in range(values.numel())],
                     dtype=torch.float64).reshape(values.shape)
    (values * g).sum().backward()
    return {"op": op, "args": args, "shape": list(values.shape),
            "values": values.detach().flatten().tolist(),
            "indices": indices.flatten().tolist(), "grad_output": g.flatten().tolist(),
            "input_grad": x.grad.flatten().tolist()}


def num(v):
    """A float as JSON holds it: NaN and the infinities as the strings kiln's doubles() reads."""
    if math.isnan(v):
        return "nan"
    return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")


def stable_topk(x, k, dim, largest):
    # torch.topk's order among ties is unspecified; kiln takes the earlier ones first, which is the
    # stable sort's order.
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def main():
    cases = [
        case("sort", {"dim": 1, "descending": False},
             lambda x: torch.sort(x, dim=1, stable=True)),
        case("sort", {"dim": -1, "descending": True},
             lambda x: torch.sort(x, dim=-1, descending=True, stable=True)),
        case("sort", {"dim": 0, "descending": True},
             lambda x: torch.sort(x, dim=0, descending=True, stable=True)),
        case("topk", {"k": 3, "dim": -1, "largest": True}, lambda x: stable_topk(x, 3, -1, True)),
        case("topk", {"k": 2, "dim": 1, "largest": False}, lambda x: stable_topk(x, 2, 1, False)),
    ]
    special = torch.tensor([3.0, math.nan, 1.0, -0.0, 3.0, 0.0, -math.inf, 2.0, math.nan])
    ascending = torch.sort(special, stable=True)
    descending = torch.sort(special, descending=True, stable=True)
    halves = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.7, 2.7, -0.2, 1e20, math.inf])
    rounding = {"input": halves.tolist(),
                "floor": torch.floor(halves).tolist(), "ceil": torch.ceil(halves).tolist(),
                "round": torch.round(halves).tolist(), "trunc": torch.trunc(halves).tolist()}
    out = pathlib.Path(__file__).with_name("sort.json")
    out.write_text(json.dumps({
        "made_by": "tests/reference/make_sort.py", "torch": torch.__version__,
        "shape": list(SHAPE), "input": base().flatten().tolist(), "cases": cases,
        "special": {"input": [num(v) for v in special.tolist()],
                    "ascending": ascending.indices.tolist(),
                    "descending": descending.indices.tolist(),
                    "argsort_int": torch.argsort(torch.tensor([4, -1, 4, 0, 7, -1])).tolist()},
        "rounding": {k: [num(v) for v in vals] for k, vals in rounding.items()}}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
