#!/usr/bin/env python3
"""Writes pad_interpolate.json: PyTorch 1.13's F.pad (constant, reflect, replicate, circular,
cropping) and F.interpolate (nearest and bilinear, by size and by scale factor, with and without
align_corners) on a [2, 3, 5, 6] f64 input: outputs and the gradients of sum(out * grad_output).
tests/test_pad_interpolate.cpp checks kiln against them.

Run with a python3 that has torch:  /usr/bin/python3 tests/reference/make_pad_interpolate.py
"""
import json
import math
import pathlib

import torch
import torch.nn.functional as F

SHAPE = (2, 3, 5, 6)


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


def pad(pads, mode, value=0.0):
    return case("pad", {"pads": pads, "mode": mode, "value": value},
                lambda x: F.pad(x, pads, mode=mode, value=value) if mode == "constant"
                else F.pad(x, pads, mode=mode))


def interp(mode, size=None, scale=None, align=False):
    kwargs = {"mode": mode}
    if mode == "bilinear":
        kwargs["align_corners"] = align
    return case("interpolate", {"mode": mode, "size": size, "scale": scale, "align": align},
                lambda x: F.interpolate(x, size=size, scale_factor=scale, **kwargs))


def main():
    cases = [
        pad([1, 2], "constant", 0.5),
        pad([2, 1, 0, 3], "constant"),
        pad([-1, 2, 1, -2], "constant", -1.0),
        pad([1, 1, 1, 0, 1, 1], "constant"),
        pad([2, 3, 1, 4], "reflect"),
        pad([3, 1, 2, 2], "replicate"),
        pad([2, 6, 5, 1], "circular"),
        interp("nearest", size=[8, 9]),
        interp("nearest", size=[3, 4]),
        interp("nearest", scale=[2.0, 2.0]),
        interp("nearest", scale=[1.5, 0.7]),
        interp("bilinear", size=[8, 11]),
        interp("bilinear", size=[3, 4]),
        interp("bilinear", size=[8, 11], align=True),
        interp("bilinear", size=[1, 4], align=True),
        interp("bilinear", scale=[1.7, 0.5]),
    ]
    out = pathlib.Path(__file__).with_name("pad_interpolate.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_pad_interpolate.py",
                               "torch": torch.__version__, "shape": list(SHAPE),
                               "input": base().flatten().tolist(), "cases": cases}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
