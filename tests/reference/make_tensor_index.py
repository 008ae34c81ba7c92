#!/usr/bin/env python3
"""Writes tensor_index.json: PyTorch 1.13's x[...] and x.index_put_(...) on f64 tensors, for
tests/test_tensor_index.cpp: integers, slices (negative and clamped bounds, steps), None,
Ellipsis, bool masks over one and several dims, integer index tensors (negative, broadcast
together, adjacent and apart), and their mixtures; the gradient of sum(x[...] * g) for each; and
index_put_ with and without accumulate, from a broadcast value.

Run with a python3 that has torch:  /usr/bin/python3 tests/reference/make_tensor_index.py
"""
import json
import math
import pathlib

import torch


def values(shape, a, b):
    n = math.prod(shape)
    return torch.tensor([math.sin(a * i + b) for i in range(n)], dtype=torch.float64).reshape(shape)


def flat(t):
    return t.detach().flatten().tolist()


# Each index entry as JSON and as the Python object it stands for.
def I(i):
    return {"int": i}, i


def S(start=None, stop=None, step=None):
    return {"slice": [start, stop, step]}, slice(start, stop, step)


NONE = ({"none": True}, None)
ELL = ({"ellipsis": True}, Ellipsis)


def M(rows):
    t = torch.tensor(rows, dtype=torch.bool)
    return {"mask": {"shape": list(t.shape), "values": [int(v) for v in t.flatten().tolist()]}}, t


def T(rows):
    t = torch.tensor(rows, dtype=torch.int64)
    return {"index": {"shape": list(t.shape), "values": t.flatten().tolist()}}, t


SHAPE = [3, 4, 5]
CASES = [
    [I(1)],
    [I(-1), S(1, None)],
    [S(None, None, 2), I(0)],
    [S(-10, 2), S(1, -1, 2), S(3, 100)],
    [NONE, I(2), NONE, S(0, 3)],
    [ELL, I(1)],
    [I(0), ELL, NONE],
    [M([True, False, True])],
    [S(), M([True, False, True, True])],
    [M([[True, False, True, False], [False, False, True, True], [True, True, False, False]])],
    [T([2, 0, 2])],
    [T([[0, -1], [1, 2]])],
    [S(), T([3, 0]), T([4, -1])],
    [T([0, 2]), S(), T([1, 3])],
    [T([[0], [2]]), T([1, 3, 0])],
    [I(1), T([0, 3]), S(1, 4)],
    [ELL, T([1, 4])],
    [T([2, 1]), M([True, False, False, True])],
    [NONE, S(), T([1]), ELL],
]

PUTS = [
    ([I(1)], [4, 5], False),
    ([S(), M([True, False, True, True])], [1, 5], False),
    ([T([0, 2]), S(), T([1, 3])], [2, 4], False),
    ([T([0, 2, 0]), T([1]), T([1, 3, 1])], [3], True),
    ([M([[True, False, True, False], [False, False, True, True], [True, True, False, False]])],
     [], False),
]


def main():
    cases = []
    for k, spec in enumerate(CASES):
        x = values(SHAPE, 0.6, 0.1 * k).requires_grad_()
        out = x[tuple(e[1] for e in spec)]
        g = values(list(out.shape), 0.3, 1.0 + k)
        (out * g).sum().backward()
        cases.append({"index": [e[0] for e in spec], "x": flat(x), "shape": list(out.shape),
                      "output": flat(out), "grad_output": flat(g), "grad": flat(x.grad)})
    puts = []
    for k, (spec, value_shape, accumulate) in enumerate(PUTS):
        x = values(SHAPE, 0.5, 0.2 * k)
        v = values(value_shape, 0.8, 0.3 + k)
        y = x.clone()
        if accumulate:
            y.index_put_(tuple(e[1] for e in spec), v, accumulate=True)
        else:
            y[tuple(e[1] for e in spec)] = v
        puts.append({"index": [e[0] for e in spec], "x": flat(x), "values": flat(v),
                     "values_shape": value_shape, "accumulate": accumulate, "output": flat(y)})
    path = pathlib.Path(__file__).with_name("tensor_index.json")
    path.write_text(json.dumps({"made_by": "tests/reference/make_tensor_index.py",
                                "torch": torch.__version__, "shape": SHAPE, "cases": cases,
                                "puts": puts}))
    print(f"wrote {path} ({len(cases)} indexings, {len(puts)} index_put_)")


if __name__ == "__main__":
    main()
