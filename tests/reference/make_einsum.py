#!/usr/bin/env python3
"""Writes einsum.json: PyTorch 1.13's einsum on f64 operands for the equations people write
(matrix products, batched and attention-style contractions, traces of products, outer products,
sums, transposes, ellipses, implicit outputs, three operands, broadcasting): outputs and the
gradients of sum(out * grad_output) for every operand. tests/test_einsum.cpp checks kiln.

Run with a python3 that has torch:  /usr/bin/python3 tests/reference/make_einsum.py
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


CASES = [
    ("ij,jk->ik", [[3, 4], [4, 5]]),
    ("ij,jk", [[3, 4], [4, 5]]),
    ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]),
    ("bhqd,bhkd->bhqk", [[2, 3, 4, 5], [2, 3, 6, 5]]),
    ("ij,ij->", [[3, 4], [3, 4]]),
    ("i,j->ij", [[3], [4]]),
    ("ij->ji", [[3, 4]]),
    ("ijk->j", [[2, 3, 4]]),
    ("...ij,...jk->...ik", [[2, 3, 4, 5], [3, 5, 2]]),
    ("b...,b->...", [[3, 2, 4], [3]]),
    ("ik,kj,jl->il", [[2, 3], [3, 4], [4, 5]]),
    ("ij,kj,k->i", [[3, 4], [5, 4], [5]]),
    ("bi,bj->bij", [[1, 3], [4, 2]]),
    ("BaC,aC->Ba", [[2, 3, 4], [3, 4]]),
    ("ba,ab", [[3, 4], [4, 3]]),
    ("ii->i", [[4, 4]]),
    ("ii", [[4, 4]]),
    ("bii->bi", [[2, 3, 3]]),
    ("iij,jk->ik", [[3, 3, 4], [4, 2]]),
    ("iii->i", [[3, 3, 3]]),
    ("ij,jj->ij", [[2, 3], [3, 3]]),
]


def main():
    cases = []
    for k, (eq, shapes) in enumerate(CASES):
        ops = [values(s, 0.7 + 0.3 * j, 0.2 * k + j).requires_grad_() for j, s in enumerate(shapes)]
        out = torch.einsum(eq, *ops)
        g = values(list(out.shape), 0.3, 0.8) if out.dim() else torch.tensor(1.7, dtype=torch.float64)
        (out * g).sum().backward()
        cases.append({"equation": eq, "shapes": shapes, "inputs": [flat(o) for o in ops],
                      "shape": list(out.shape), "output": flat(out), "grad_output": flat(g),
                      "grads": [flat(o.grad) for o in ops]})
    path = pathlib.Path(__file__).with_name("einsum.json")
    path.write_text(json.dumps({"made_by": "tests/reference/make_einsum.py",
                                "torch": torch.__version__, "cases": cases}))
    print(f"wrote {path} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
