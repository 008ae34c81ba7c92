#!/usr/bin/env python3
"""Writes activations.json: PyTorch 1.13's ELU, Softplus, Hardswish, PReLU (one weight and one
per channel) and LeakyReLU (f64) on inputs that avoid each kink by at least 1e-3: outputs and the
gradients of sum(out * grad_output) for the input and PReLU's weight.
tests/test_activations.cpp checks kiln against them.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_activations.py
"""
import json
import math
import pathlib

import torch
from torch import nn

SHAPE = (2, 3, 4, 5)


def values(scale, phase):
    n = math.prod(SHAPE)
    return torch.tensor([scale * math.sin(0.61 * i + phase) + 0.0137 for i in range(n)],
                        dtype=torch.float64).reshape(SHAPE)


def case(name, module, options, x):
    module = module.double()
    x = x.clone().requires_grad_()
    out = module(x)
    g = values(0.8, 1.9)
    (out * g).sum().backward()
    entry = {"module": name, "options": options, "input": x.detach().flatten().tolist(),
             "grad_output": g.flatten().tolist(), "output": out.detach().flatten().tolist(),
             "input_grad": x.grad.flatten().tolist()}
    if isinstance(module, nn.PReLU):
        entry["weight"] = module.weight.detach().tolist()
        entry["weight_grad"] = module.weight.grad.tolist()
    return entry


def main():
    x = values(5.0, 0.3)  # spans -5..5: both sides of each kink, and hardswish's plateaus
    big = values(30.0, 0.7)  # softplus's linear region past the threshold
    cases = [
        case("ELU", nn.ELU(), {}, x),
        case("ELU", nn.ELU(alpha=0.5), {"alpha": 0.5}, x),
        case("Softplus", nn.Softplus(), {}, x),
        case("Softplus", nn.Softplus(beta=2.0, threshold=10.0), {"beta": 2.0, "threshold": 10.0},
             big),
        case("Hardswish", nn.Hardswish(), {}, x),
        case("LeakyReLU", nn.LeakyReLU(0.2), {"negative_slope": 0.2}, x),
    ]
    one = nn.PReLU()
    cases.append(case("PReLU", one, {"num_parameters": 1}, x))
    per_channel = nn.PReLU(3)
    with torch.no_grad():
        per_channel.weight.copy_(torch.tensor([0.1, -0.3, 0.6]))
    cases.append(case("PReLU", per_channel, {"num_parameters": 3}, x))
    out = pathlib.Path(__file__).with_name("activations.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_activations.py",
                               "torch": torch.__version__, "shape": list(SHAPE), "cases": cases}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
