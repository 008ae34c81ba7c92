#!/usr/bin/env python3
"""Writes conv_variants.json: PyTorch 1.13's conv_transpose2d (strides, padding, output_padding,
groups, dilation) and conv1d on f64 inputs: outputs and the gradients of sum(out * grad_output)
for input, weight and bias. tests/test_conv_variants.cpp checks kiln against them.

Run with a python3 that has torch:  /usr/bin/python3 tests/reference/make_conv_variants.py
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


def case(op, args, x_shape, w_shape, fn):
    x = values(x_shape, 1.1, 0.4).requires_grad_()
    w = values(w_shape, 0.7, 1.9).requires_grad_()
    b = values([args["bias"]], 2.3, 0.1).requires_grad_()
    out = fn(x, w, b)
    g = values(list(out.shape), 0.3, 0.8)
    (out * g).sum().backward()
    return {"op": op, "args": args, "x_shape": x_shape, "w_shape": w_shape, "shape": list(out.shape),
            "x": flat(x), "w": flat(w), "b": flat(b), "output": flat(out), "grad_output": flat(g),
            "x_grad": flat(x.grad), "w_grad": flat(w.grad), "b_grad": flat(b.grad)}


def transpose(x_shape, w_shape, stride, padding, output_padding, groups, dilation):
    args = {"stride": stride, "padding": padding, "output_padding": output_padding,
            "groups": groups, "dilation": dilation, "bias": w_shape[1] * groups}
    return case("conv_transpose2d", args, x_shape, w_shape,
                lambda x, w, b: F.conv_transpose2d(x, w, b, stride, padding, output_padding,
                                                   groups, dilation))


def conv1d(x_shape, w_shape, stride, padding, dilation, groups):
    args = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups,
            "bias": w_shape[0]}
    return case("conv1d", args, x_shape, w_shape,
                lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation, groups))


def main():
    cases = [
        transpose([2, 4, 5, 6], [4, 3, 3, 3], [1, 1], [0, 0], [0, 0], 1, [1, 1]),
        transpose([2, 4, 5, 6], [4, 3, 3, 3], [2, 2], [1, 1], [1, 1], 1, [1, 1]),
        transpose([2, 4, 4, 5], [4, 2, 3, 2], [2, 3], [1, 0], [0, 2], 2, [1, 1]),
        transpose([1, 2, 4, 4], [2, 3, 3, 3], [1, 2], [2, 1], [0, 1], 1, [2, 2]),
        conv1d([2, 4, 9], [6, 4, 3], 1, 1, 1, 1),
        conv1d([2, 4, 11], [6, 2, 3], 2, 2, 2, 2),
    ]
    out = pathlib.Path(__file__).with_name("conv_variants.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_conv_variants.py",
                               "torch": torch.__version__, "cases": cases}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
