#!/usr/bin/env python3
"""Writes double_backward.json: PyTorch 1.13's second derivatives in f64, for
tests/test_double_backward.cpp:
- a gradient penalty (WGAN-GP style) on a small MLP (linear, tanh, relu, linear): the critic's
  mean output plus 10 (||d out / d x|| - 1)^2, differentiated with respect to every parameter;
- Hessian-vector products H v of f(x) = sum(w * op(x)) for ops people differentiate twice.

Run with a python3 that has torch:  /usr/bin/python3 tests/reference/make_double_backward.py
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


OPS = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "softplus": F.softplus,
    "elu": F.elu,
    "exp": torch.exp,
    "sin": torch.sin,
    "reciprocal_shifted": lambda x: torch.reciprocal(x + 2.0),
    "log_shifted": lambda x: torch.log(x + 2.0),
    "sqrt_shifted": lambda x: torch.sqrt(x + 2.0),
    "cube": lambda x: x.pow(3.0),
    "softmax": lambda x: torch.softmax(x, 1),
    "log_softmax": lambda x: torch.log_softmax(x, 1),
    "layer_norm": lambda x: F.layer_norm(x, [5]),
    "norm_rows": lambda x: torch.linalg.vector_norm(x, 2, dim=1),
    "var_rows": lambda x: torch.var(x, 1),
    "matmul_self": lambda x: x @ x.t(),
    "cat_slices": lambda x: torch.cat([(x[:, 1:3] * x[:, 0:2]).flatten(), x[1] * x[2]]).exp(),
    "max_rows": lambda x: torch.amax(x * x, 1),
}


def main():
    cases = []
    for k, (name, op) in enumerate(OPS.items()):
        x = values([3, 5], 0.9, 0.3 * k).requires_grad_()
        out = op(x)
        w = values(list(out.shape), 0.4, 1.1)
        v = values([3, 5], 0.7, 0.5 + k)
        (g,) = torch.autograd.grad((out * w).sum(), x, create_graph=True)
        (hv,) = torch.autograd.grad((g * v).sum(), x)
        cases.append({"op": name, "x": flat(x), "w": flat(w), "v": flat(v), "shape": list(out.shape),
                      "grad": flat(g), "hvp": flat(hv)})

    torch.manual_seed(0)
    x = values([4, 5], 0.8, 0.1).requires_grad_()
    params = {"w1": values([6, 5], 0.5, 0.2) * 0.5, "b1": values([6], 0.3, 0.4) * 0.1,
              "w2": values([4, 6], 0.6, 0.9) * 0.5, "b2": values([4], 0.2, 0.7) * 0.1,
              "w3": values([1, 4], 0.9, 0.3), "b3": values([1], 0.1, 0.2)}
    for p in params.values():
        p.requires_grad_()

    def critic(inp):
        h = torch.tanh(F.linear(inp, params["w1"], params["b1"]))
        h = torch.relu(F.linear(h, params["w2"], params["b2"]))
        return F.linear(h, params["w3"], params["b3"])

    out = critic(x)
    (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    penalty = ((gx.norm(2, dim=1) - 1.0) ** 2).mean()
    loss = out.mean() + 10.0 * penalty
    loss.backward()
    penalty_case = {"x": flat(x), "params": {k: flat(p) for k, p in params.items()},
                    "shapes": {k: list(p.shape) for k, p in params.items()},
                    "loss": loss.item(), "grad_x": flat(gx),
                    "grads": {k: flat(p.grad) for k, p in params.items()}, "x_grad": flat(x.grad)}

    path = pathlib.Path(__file__).with_name("double_backward.json")
    path.write_text(json.dumps({"made_by": "tests/reference/make_double_backward.py",
                                "torch": torch.__version__, "hvp": cases, "penalty": penalty_case}))
    print(f"wrote {path} ({len(cases)} Hessian-vector products and a gradient penalty)")


if __name__ == "__main__":
    main()
