#!/usr/bin/env python3
"""Writes nonfinite.json: what PyTorch gives for NaN, inf and -inf (and signed zeros) through every
elementwise op, reduction, softmax, norm and pooling that kiln has, forward and backward (f64;
the gradient for the grad_output stored with each case). tests/test_nonfinite.cpp holds kiln's CPU
to it and tests/cuda/test_nonfinite.cpp the GPU. Non-finite numbers are written as the strings
"nan", "inf" and "-inf", which JSON lacks.

Run with a python3 that has torch:  python3 tests/reference/make_nonfinite.py
"""
import json
import math
import pathlib

import torch
import torch.nn.functional as F

nan, inf = math.nan, math.inf
SPECIAL = [nan, inf, -inf, 0.0, -0.0, 1.5, -2.0, 0.5]
# Every pair of (nan, inf, -inf, 0, 1, -1): 36 pairs.
PAIR_VALUES = [nan, inf, -inf, 0.0, 1.0, -1.0]
PAIR_A = [a for a in PAIR_VALUES for _ in PAIR_VALUES]
PAIR_B = [b for _ in PAIR_VALUES for b in PAIR_VALUES]
# Rows: a NaN, a +inf, both infinities, a -inf, finite; reductions over dim 1 and everything.
ROWS = [[1.0, nan, 2.0, -1.0],
        [1.0, inf, 2.0, -1.0],
        [-inf, inf, 0.5, 1.0],
        [-inf, 3.0, 0.5, 1.0],
        [-inf, -inf, -inf, -inf],
        [0.25, -3.0, 0.5, 1.0]]


def encode(values):
    return [v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
            for v in values]


def run(name, fn, inputs, differentiable=True, args=None):
    leaves = [torch.tensor(x, dtype=torch.float64, requires_grad=differentiable) for x in inputs]
    out = fn(*leaves)
    outputs = out if isinstance(out, tuple) else (out,)
    case = {"op": name, "args": args or {},
            "inputs": [{"shape": list(l.shape), "values": encode(l.detach().flatten().tolist())}
                       for l in leaves],
            "outputs": [encode(o.detach().double().flatten().tolist()) for o in outputs]}
    if differentiable:
        # Not all ones: the sum of a softmax or a norm's output is constant, and its gradient zero.
        n = outputs[0].numel()
        grad_output = torch.tensor([1.0 + 0.25 * (i % 4) for i in range(n)], dtype=torch.float64)
        case["grad_output"] = grad_output.tolist()
        outputs[0].backward(grad_output.reshape(outputs[0].shape))
        case["grads"] = [encode(l.grad.flatten().tolist()) if l.grad is not None else None
                         for l in leaves]
    return case


def cases():
    out = []
    unary = {
        "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "exp": torch.exp,
        "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "square": torch.square,
        "reciprocal": torch.reciprocal, "erf": torch.erf, "sin": torch.sin, "cos": torch.cos,
        "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": F.silu,
        "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
        "gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "clamp": lambda x: torch.clamp(x, -1.0, 1.0),
        "clamp_min": lambda x: torch.clamp(x, min=0.0),
        "pow_2": lambda x: torch.pow(x, 2.0), "pow_half": lambda x: torch.pow(x, 0.5),
        "pow_minus_1": lambda x: torch.pow(x, -1.0),
    }
    for name, fn in unary.items():
        out.append(run(name, fn, [SPECIAL]))
    for name, fn in {"isnan": torch.isnan, "logical_not": torch.logical_not}.items():
        out.append(run(name, fn, [SPECIAL], differentiable=False))

    binary = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
              "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum}
    for name, fn in binary.items():
        out.append(run(name, fn, [PAIR_A, PAIR_B]))
    compare = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
               "ge": torch.ge}
    for name, fn in compare.items():
        out.append(run(name, fn, [PAIR_A, PAIR_B], differentiable=False))
    out.append(run("where", lambda a, b: torch.where(a > b, a, b), [PAIR_A, PAIR_B]))
    out.append(run("masked_fill", lambda a: a.masked_fill(torch.isnan(a), 0.0), [SPECIAL]))

    dims = {"sum_all": lambda x: x.sum(), "sum_dim": lambda x: x.sum(1),
            "mean_all": lambda x: x.mean(), "mean_dim": lambda x: x.mean(1),
            "var_dim": lambda x: x.var(1), "std_dim": lambda x: x.std(1),
            "norm2_dim": lambda x: torch.linalg.vector_norm(x, 2, dim=1),
            "norm1_dim": lambda x: torch.linalg.vector_norm(x, 1, dim=1),
            "norminf_dim": lambda x: torch.linalg.vector_norm(x, inf, dim=1),
            "max_dim": lambda x: x.max(1), "min_dim": lambda x: x.min(1),
            "max_all": lambda x: x.max(), "min_all": lambda x: x.min(),
            "amax_dim": lambda x: x.amax(1), "amin_dim": lambda x: x.amin(1),
            "cumsum_dim": lambda x: x.cumsum(1),
            "softmax": lambda x: torch.softmax(x, 1),
            "log_softmax": lambda x: torch.log_softmax(x, 1)}
    for name, fn in dims.items():
        out.append(run(name, fn, [ROWS]))
    for name, fn in {"argmax_dim": lambda x: x.argmax(1), "argmin_dim": lambda x: x.argmin(1),
                     "argmax_all": lambda x: x.argmax()}.items():
        out.append(run(name, fn, [ROWS], differentiable=False))

    # [N=2, C=3, 2, 2]: channel 0 holds a NaN, channel 1 an inf, channel 2 is finite.
    images = [[[[0.5, nan], [1.0, -1.0]], [[2.0, inf], [0.0, 1.0]], [[1.0, 2.0], [3.0, -4.0]]],
              [[[1.5, 0.5], [-0.5, 2.0]], [[1.0, 0.0], [-1.0, 3.0]], [[0.0, -1.0], [2.5, 1.0]]]]
    out.append(run("batch_norm", lambda x: F.batch_norm(x, None, None, training=True), [images]))
    out.append(run("batch_norm_relu",
                   lambda x: torch.relu(F.batch_norm(x, None, None, training=True)), [images]))
    out.append(run("layer_norm", lambda x: F.layer_norm(x, [4]), [ROWS]))
    out.append(run("max_pool2d", lambda x: F.max_pool2d(x, 2), [images]))
    out.append(run("avg_pool2d", lambda x: F.avg_pool2d(x, 2), [images]))
    out.append(run("mse_loss", lambda a, b: F.mse_loss(a, b, reduction="none"), [PAIR_A, PAIR_B]))
    return out


def main():
    all_cases = cases()
    header = json.dumps({"torch": torch.__version__})[:-1]
    lines = ",\n".join("  " + json.dumps(c) for c in all_cases)
    path = pathlib.Path(__file__).with_name("nonfinite.json")
    path.write_text(header + ', "cases": [\n' + lines + "\n]}\n")
    print(f"wrote {len(all_cases)} cases to {path}")


if __name__ == "__main__":
    main()
